"""HTTP clients for OpenAI-compatible endpoints, shared by the `openai` chat expert and the LM router's endpoint
backend."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["http_client"]


def http_client(api_key_env: str | None, timeout_s: float) -> "httpx.Client":
    """An HTTP client for an OpenAI-compatible endpoint, with the bearer key read from `api_key_env` when set;
    KeyError (with the message) when that variable is empty. Shared by the expert and the LM policy backend."""
    import httpx

    headers = {}
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise KeyError(f"environment variable {api_key_env} (the API key) is not set")
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(headers=headers, timeout=timeout_s)
