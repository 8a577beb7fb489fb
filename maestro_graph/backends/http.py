"""HTTP clients for OpenAI-compatible endpoints, shared by the `openai` chat expert and the LM router's endpoint
backend."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..core.environment import named

if TYPE_CHECKING:
    import httpx

__all__ = ["LazyClient", "http_client"]


def http_client(api_key_env: str | None, timeout_s: float) -> httpx.Client:
    """An HTTP client for an OpenAI-compatible endpoint, with the bearer key read from `api_key_env` when set;
    KeyError (with the message) when that variable is empty. Shared by the expert and the LM policy backend."""
    import httpx

    headers = {}
    if api_key_env:
        key = named(api_key_env)
        if not key:
            raise KeyError(f"environment variable {api_key_env} (the API key) is not set")
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(headers=headers, timeout=timeout_s)


class LazyClient:
    """The one client of an endpoint, made on the first call and shared by threads: building a registry or a
    policy never needs the API key, and a missing key is reported by the call that needs it, as `error`."""

    def __init__(self, api_key_env: str | None, timeout_s: float, error: type[Exception]):
        self.api_key_env, self.timeout_s, self.error = api_key_env, timeout_s, error
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def get(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                try:
                    self._client = http_client(self.api_key_env, self.timeout_s)
                except KeyError as exc:
                    raise self.error(exc.args[0]) from exc
            return self._client
