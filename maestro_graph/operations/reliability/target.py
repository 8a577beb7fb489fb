"""What every check of the trust suite stands on: the served Maestro under attack (`Target`), a check's outcome
(`TrustCase`), the suite's own loopback listener and planted pickle, and the few ways the checks talk to a server
and measure it (a chat request, a timed POST, the process's RSS sampled while something runs)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

__all__ = ["LANGSERVE_MISSING", "QUESTION", "JSON_BODY", "Target", "TrustCase", "Listener", "PlantedPickle", "chat",
           "answer_of", "rss_mb", "peak_rss_growth_mb", "post_timed", "error_code", "langserve_mounted"]

QUESTION = "What text does the QR code encode?"
T = TypeVar("T")
JSON_BODY = {"Content-Type": "application/json"}
"""The headers of a body a check writes itself (JSON no client library would send)."""

@dataclass
class Target:
    """A served Maestro under attack: its base URL, its process (for RSS), a scratch folder, a QR data URL,
    and the registry file it serves (the suite starts variants of it)."""

    url: str
    pid: int
    folder: Path
    image: str
    registry_file: Path


@dataclass
class TrustCase:
    attack: str
    must: str
    ok: bool
    detail: str
    skipped: str | None = None
    """Why the check could not run against this server, and how to make it run (None: it ran). A skipped check
    proves nothing either way: it neither holds nor fails the suite."""


LANGSERVE_MISSING = ("the server mounts no LangServe routes: the `langserve` extra is not installed "
                     "(pip install 'maestro-graph[langserve]')")


class Listener:
    """A loopback TCP listener that counts connections and never answers (an internal service, or a hang)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        """What happens to an accepted connection: held open, never answered (a subclass answers it its way)."""
        self._held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


class PlantedPickle:
    """Unpickling this creates the marker file: what an attacker's pickle would do with a shell command (the
    suite and the tests plant it as a checkpoint, a cache entry or a policy file)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def chat(url: str, *, policy: str | None = None, image: str | None = None, timeout: float = 60) -> httpx.Response:
    content: list[dict] = [{"type": "text", "text": QUESTION}]
    if image:
        content.append({"type": "image_url", "image_url": {"url": image}})
    body: dict = {"model": "maestro", "messages": [{"role": "user", "content": content}]}
    if policy is not None:
        body["policy"] = policy
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def answer_of(reply: httpx.Response) -> str | None:
    return reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def peak_rss_growth_mb(pid: int, action: Callable[[], T], *, settle_s: float = 0.0) -> tuple[float, float, T]:
    """Run `action` while sampling the RSS of process `pid` every 20 ms, and `settle_s` more seconds after it
    returned: (RSS before in MB, peak growth in MB, what `action` returned). Sampled, because memory a request held
    and gave back no longer shows afterwards."""
    idle = rss_mb(pid)
    peak, done = idle, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = action()
        time.sleep(settle_s)
    finally:
        done.set()
        sampler.join()
    return idle, max(peak, rss_mb(pid)) - idle, result


def post_timed(url: str, path: str, **kwargs) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    reply = httpx.post(f"{url}{path}", timeout=60, **kwargs)
    return reply, time.perf_counter() - start


def error_code(reply: httpx.Response) -> str | None:
    try:
        return reply.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def langserve_mounted(url: str, headers: dict[str, str] | None = None) -> bool:
    """Whether the server at `url` mounts LangServe's routes (the `langserve` extra), as its /healthz says."""
    return bool(httpx.get(f"{url}/healthz", timeout=30, headers=headers).json().get("langserve"))
