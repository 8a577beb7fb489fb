"""A named test double of an OpenAI-compatible vision-language endpoint, for what only a double can do: scripted
right and wrong answers and faults. What a real server does with a request (vLLM's token counts, its image and context
limits and their wording, the card options it accepts, its chat template) is checked against real vLLM serving a tiny
Qwen2.5-VL in tests/test_vllm_vision.py, never here.

`VisionEndpointDouble` is a real HTTP server on 127.0.0.1 that speaks OpenAI chat completions. It checks what it is
sent: every request must be one (model name, messages, roles, content parts, `image_url` data URLs that decode as
images), else it answers 400 naming the problem; it records what it received (`requests`: the system text, the user
text, the decoded images, the headers). It answers as scripted: from its `lookup` (image digest to the questions asked
of it, each with its answer, a wrong answer of the same form and the instructions it needs, which a test builds from a
labelled task file), else the first of `replies` whose pattern the user text matches, with the scripted `usage` (fixed
figures, not a count of anything). A lookup entry is answered right only when the request's system message is the
entry's instructions (the `SKILL.md` body of the skill that fits the item): a test can tell which skill's instructions
a pair sent by the answer it gets. Its faults: `behaviour` (an HTTP status such as 429 or 503, a malformed body, or no
answer at all, a hang past the client's timeout), `refuse` (a rule naming why a request is answered 400, which a test
writes for an API it cannot call, such as a hosted model's documented refusals) and `delay_s` (each answer takes that
long, as on a busy server; `peak` counts the most requests it was answering at once).

Run as a program, `vision_double.py serve MODEL --port PORT [vllm serve's other options]`, it stands in for the
`vllm serve` command (scripts/serve-vlm.sh's `VLLM`) where a test checks how the script starts and stops servers,
answering every question with `--reply` until it is stopped.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

__all__ = ["USAGE", "Asked", "Received", "Refusal", "VisionEndpointDouble", "image_digest"]

USAGE = {"prompt_tokens": 300, "completion_tokens": 2}
"""The `usage` a double reports by default: scripted figures, not a count (vLLM's own count is
tests/test_vllm_vision.py's)."""
Refusal = Callable[[dict], str | None]
"""A scripted refusal: given a request's body, the message to answer 400 with, or None to take it."""
_DETAILS = ("low", "high", "auto")
_NOT_FOUND = b'{"error": {"message": "not found"}}'
_DATA_URL_RE = re.compile(r"^data:image/(png|jpeg|webp|gif);base64,([A-Za-z0-9+/=]+)$")


@dataclass
class Received:
    """One valid request as the double decoded it."""

    body: dict
    system: str
    user_text: str
    images: list[Image.Image] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    """The HTTP headers, names in lower case."""


@dataclass(frozen=True)
class Asked:
    """A question asked of an image in a double's `lookup`: `answer` when the request carries `instructions` as its
    system message (or `instructions` is None), else `wrong`."""

    question: str
    answer: str
    wrong: str
    instructions: str | None = None

    def reply(self, system: str) -> str:
        return self.answer if self.instructions is None or system.strip() == self.instructions.strip() else self.wrong


def image_digest(image: Image.Image) -> str:
    """The digest of an image's RGB pixels and size: the same for a file the test reads and for the PNG a card sends
    of it (when the card does not downscale it), whatever the file's own format."""
    rgb = image.convert("RGB")
    return hashlib.sha256(f"{rgb.width}x{rgb.height}".encode() + rgb.tobytes()).hexdigest()[:16]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


class _Invalid(Exception):
    """A request that is not an OpenAI chat completion request, or that a scripted rule refuses (answered 400)."""


def _decode_image(url: Any) -> tuple[Image.Image, str]:
    match = _DATA_URL_RE.match(url) if isinstance(url, str) else None
    if match is None:
        raise _Invalid(f"image_url.url must be a base64 data:image/... URL; got {str(url)[:60]!r}")
    try:
        image = Image.open(io.BytesIO(base64.b64decode(match.group(2), validate=True)))
        image.load()
    except (binascii.Error, OSError, ValueError) as exc:
        raise _Invalid(f"image_url data does not decode as an image: {exc}") from exc
    if image.format.lower() != match.group(1):
        raise _Invalid(f"data URL says image/{match.group(1)} but holds {image.format}")
    return image, image.format.lower()


def _parse(body: Any, model: str, refuse: Refusal | None = None) -> Received:
    """The request decoded, or _Invalid naming the first problem: not an OpenAI chat completion request for `model`,
    or refused by the scripted `refuse`."""
    if not isinstance(body, dict) or body.get("model") != model:
        raise _Invalid(f"model must be {model!r}; got {body.get('model') if isinstance(body, dict) else body!r}")
    problem = refuse(body) if refuse else None
    if problem:
        raise _Invalid(problem)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Invalid("messages must be a non-empty list")
    if not isinstance(body.get("max_tokens", 1), int) or not isinstance(body.get("temperature", 0.0), (int, float)):
        raise _Invalid("max_tokens must be an integer and temperature a number")
    system, user_text, images, formats = "", "", [], []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise _Invalid(f"messages[{i}] must have a role of system, user or assistant")
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list) or not parts:
            raise _Invalid(f"messages[{i}].content must be a string or a list of content parts")
        for part in parts:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                text = part["text"]
            elif kind == "image_url" and message["role"] == "user" and isinstance(part.get("image_url"), dict):
                if part["image_url"].get("detail", "auto") not in _DETAILS:
                    raise _Invalid(f"messages[{i}]: image_url.detail must be one of {list(_DETAILS)}")
                image, fmt = _decode_image(part["image_url"].get("url"))
                images.append(image)
                formats.append(fmt)
                continue
            else:
                raise _Invalid(f"messages[{i}]: a content part must be text or (in a user message) image_url")
            if message["role"] == "system":
                system += text
            elif message["role"] == "user" and i == len(messages) - 1:
                user_text += text
    if messages[-1]["role"] != "user":
        raise _Invalid("the last message must be the user's")
    return Received(body=body, system=system, user_text=user_text, images=images, formats=formats)


class VisionEndpointDouble:
    """A vision-language chat endpoint on a loopback port (a context manager). `url` is the base URL a card's
    `backend.base_url` takes; `replies` are (regex over the user text, reply) pairs, the first match answering, else
    `default`; `lookup` maps an image digest (`image_digest`) to the questions asked of that image (`Asked`), and
    answers a request holding that image first (the question sharing most words with the user text, where one image has
    several), right only under the instructions the entry names; `usage` is every reply's (default `USAGE`);
    `behaviour` is "answer", an HTTP status to fail with, "malformed" or "hang"; `refuse` answers 400 to the requests
    it names a reason for."""

    def __init__(self, model: str = "vlm-double", replies: list[tuple[str, str]] | None = None,
                 default: str = "I cannot tell.", hang_s: float = 3.0,
                 lookup: dict[str, list[Asked]] | None = None, delay_s: float = 0.0, port: int = 0,
                 usage: dict[str, Any] | None = None, refuse: Refusal | None = None):
        self.model = model
        self.usage = dict(usage or USAGE)
        """The `usage` of every reply, as scripted."""
        self.refuse = refuse
        self.port = port
        """The port to listen on (0: a free one chosen at start)."""
        self.replies = list(replies or [])
        self.lookup = dict(lookup or {})
        self.default = default
        self.behaviour: str | int = "answer"
        self.hang_s = hang_s
        self.requests: list[Received] = []
        """Every valid request, in order of arrival."""
        self.posts = 0
        """Every POST, valid or not (retries included)."""
        self.problems: list[str] = []
        """Why each invalid request was refused."""
        self.delay_s = delay_s
        self.in_flight = 0
        """Requests being answered now."""
        self.peak = 0
        """The most requests answered at once."""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use the double as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply_for(self, received: Received) -> str:
        asked = [entry for image in received.images for entry in self.lookup.get(image_digest(image), [])]
        if asked:
            words = _words(received.user_text)
            return max(asked, key=lambda entry: len(_words(entry.question) & words)).reply(received.system)
        return next((reply for pattern, reply in self.replies if re.search(pattern, received.user_text, re.I)),
                    self.default)

    def _counted(self, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """`_respond`, after `delay_s`, counted in `in_flight` and `peak` while it runs."""
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.delay_s)
            return self._respond(raw, headers)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(self, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        with self._lock:
            self.posts += 1
        if isinstance(self.behaviour, int):
            return self.behaviour, json.dumps({"error": {"message": f"double answers {self.behaviour}"}}).encode()
        if self.behaviour == "hang":
            time.sleep(self.hang_s)
        try:
            received = _parse(json.loads(raw), self.model, self.refuse)
            received.headers = headers
        except (_Invalid, ValueError) as exc:
            with self._lock:
                self.problems.append(str(exc))
            return 400, json.dumps({"error": {"message": str(exc), "type": "BadRequestError"}}).encode()
        with self._lock:
            self.requests.append(received)
        if self.behaviour == "malformed":
            return 200, b'{"choices": [{"message": '
        return 200, json.dumps({"id": f"chatcmpl-{self.posts}", "object": "chat.completion", "model": self.model,
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": self.reply_for(received)}}],
                                "usage": self.usage}).encode()

    def __enter__(self) -> VisionEndpointDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def send_json(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def do_POST(self):  # noqa: N802 - the http.server naming
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                self.send_json(*(double._counted(raw, headers) if self.path == "/v1/chat/completions"
                                 else (404, _NOT_FOUND)))

            def do_GET(self):  # noqa: N802 - the http.server naming; what `vllm serve` answers once it is up
                models = {"object": "list", "data": [{"id": double.model, "object": "model"}]}
                self.send_json(*((200, json.dumps(models).encode()) if self.path == "/v1/models"
                                 else (404, _NOT_FOUND)))

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _serve_like_vllm() -> None:
    """`vllm serve MODEL --port PORT ...` as scripts/serve-vlm.sh runs it, answering `--reply` until SIGTERM. It
    first prints when it started, its process id, its arguments and CUDA_VISIBLE_DEVICES as one JSON line, and, like
    vLLM loading a model, takes `--startup-s` before it listens."""
    import argparse
    import os
    import signal
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--reply", default="7")
    parser.add_argument("--startup-s", type=float, default=float(os.environ.get("DOUBLE_STARTUP_S", "0")))
    args, _vllm_options = parser.parse_known_args()
    print(json.dumps({"started": time.time(), "pid": os.getpid(), "argv": sys.argv[1:],
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    time.sleep(args.startup_s)
    with VisionEndpointDouble(args.served_model_name or args.model, default=args.reply, port=args.port):
        print(json.dumps({"listening": time.time()}), flush=True)
        stop.wait()


if __name__ == "__main__":
    _serve_like_vllm()
