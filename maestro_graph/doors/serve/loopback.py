"""An app served by uvicorn on a free loopback port in a background thread: for `maestro reliability`'s
trust-boundary scenarios and the tests, which talk to a real HTTP server rather than calling the app."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx

from ...errors import import_extra

__all__ = ["free_port", "running_app", "wait_until_up"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, *, timeout_s: float = 120, alive=lambda: None) -> None:
    """Poll `url` until it answers 200. `alive()` may raise to stop early (a server process that exited)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        alive()
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout_s} s")


@contextlib.contextmanager
def running_app(app) -> Iterator[str]:
    """Serve an ASGI app on a free loopback port in a background thread; yields its base URL."""
    port = free_port()
    uvicorn = import_extra("uvicorn", "serve", "a Maestro server")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/healthz", timeout_s=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
