"""Any OpenAI-compatible chat endpoint (`vllm serve`, a hosted API) as a `chat` / `vision-chat` expert.

Messages go out as they are (images in them are already data URLs), with what the card says to send: its token limit
under the field it names (`max_tokens`, or `max_completion_tokens` for OpenAI's reasoning models, which refuse the
other), its temperature unless unset, each image part's `detail`, its `extra_body` fields and its headers. Every
failure becomes an ExpertError that names the URL and what went wrong, with its kind (`ExpertFailure`), so the
episode records whose fault it was and goes on: the endpoint unreachable or overloaded (unavailable; retried),
rate-limited (HTTP 429: unavailable; retried), timed out (retried), the request refused as this request's fault
(HTTP 400, 413, 422: `RequestRefused`, a rejected input, e.g. more images than `vllm serve --limit-mm-per-prompt`
takes or a prompt above its context; not retried, and never held against the endpoint: one client's bad request
must not open the breaker that drops the model for every client), another HTTP error with the server's message, or
a reply that is not a chat completion (wrong type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..backends.http import LazyClient
from ..errors import ExpertError, ExpertFailure, ExpertRejected, ExpertTimeout
from .protocols import ChatReply

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAIChatExpert", "RequestRefused", "DEFAULT_TIMEOUT_S", "MAX_ERROR_BODY", "REFUSED_STATUS"]

DEFAULT_TIMEOUT_S = 120.0
"""HTTP timeout of one request; the model card's `timeout_s` still bounds the call as the episode sees it."""
MAX_ERROR_BODY = 300
"""Characters of an error response's body quoted in the ExpertError."""
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses the server may not answer next time: the error is transient and the handle retries it."""
REFUSED_STATUS = frozenset({400, 413, 422})
"""HTTP statuses that say the request itself cannot be served (vLLM answers 400 to too many images, a prompt above
its context, an option it does not take): the same request fails the same way, and a healthy endpoint answers it."""
_STATUS_FAILURE = {408: ExpertFailure.TIMEOUT, 429: ExpertFailure.UNAVAILABLE, 502: ExpertFailure.UNAVAILABLE,
                   503: ExpertFailure.UNAVAILABLE, 504: ExpertFailure.TIMEOUT}
"""What an HTTP status says went wrong; any other is the endpoint's crash (a wrong model name, a server bug)."""
_STATUS_MEANING = {413: "the request is too large for the endpoint (images above what it takes?)",
                   429: "rate-limited by the endpoint", 503: "the endpoint is overloaded or starting"}


class RequestRefused(ExpertRejected):
    """The endpoint refused this request as malformed or too large for it (HTTP 400, 413, 422), quoting its reason:
    the request's fault, so it is not retried and the endpoint's breaker does not count it."""


class OpenAIChatExpert:
    """POSTs `{base_url}/chat/completions`. The HTTP client (a connection pool, safe to share between threads) is
    created on the first call."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        max_tokens: int = 256,
        temperature: float | None = 0.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        token_limit_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        image_detail: str | None = None,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.max_tokens = max_tokens
        self.token_limit_field = token_limit_field
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.headers = dict(headers or {})
        self.image_detail = image_detail
        self.timeout_s = timeout_s
        self._http = LazyClient(api_key_env, timeout_s, ExpertError)

    def request_body(self, messages: list[dict]) -> dict[str, Any]:
        """The JSON body sent for `messages`: the card's token limit under the field it names, its temperature
        unless unset, each image part's `detail` when set, then its `extra_body`."""
        if self.image_detail is not None:
            messages = [_with_detail(message, self.image_detail) for message in messages]
        body: dict[str, Any] = {"model": self.model, "messages": messages, self.token_limit_field: self.max_tokens}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return {**body, **self.extra_body}

    def chat(self, messages: list[dict]) -> ChatReply:
        if not messages:
            raise ExpertError("chat needs at least one message")
        import httpx

        try:
            response = self._http.get().post(self.url, json=self.request_body(messages), headers=self.headers)
        except httpx.TimeoutException as exc:
            message = f"POST {self.url} timed out after {self.timeout_s:g}s ({exc.__class__.__name__})"
            raise ExpertTimeout(message) from exc
        except httpx.TransportError as exc:
            raise ExpertError(f"cannot reach {self.url} (endpoint down?): {exc.__class__.__name__}: {exc}",
                              transient=True, failure=ExpertFailure.UNAVAILABLE) from exc
        if response.status_code >= 400:
            raise self._status_error(response)
        return self._parse(response)

    def _status_error(self, response: httpx.Response) -> ExpertError:
        """The error an HTTP error status is, with what it means and the server's own message."""
        status = response.status_code
        body = response.text.strip().replace("\n", " ")[:MAX_ERROR_BODY]
        meaning = f" ({_STATUS_MEANING[status]})" if status in _STATUS_MEANING else ""
        message = f"POST {self.url} returned HTTP {status} {response.reason_phrase}{meaning}: {body}"
        if status in REFUSED_STATUS:
            return RequestRefused(message)
        return ExpertError(message, transient=status in RETRYABLE_STATUS, failure=_STATUS_FAILURE.get(status))

    def _parse(self, response: httpx.Response) -> ChatReply:
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"] or ""
            usage = data.get("usage") or {}
            tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            # reasoning models report their hidden reasoning inside completion_tokens (so it is charged); the
            # share is kept for the record
            reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
            if not isinstance(text, str):
                raise TypeError(f"message content is {type(text).__name__}, not text")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ExpertError(
                f"POST {self.url} returned a malformed reply, not an OpenAI chat completion "
                f"({exc.__class__.__name__}): {response.text[:MAX_ERROR_BODY]}", failure=ExpertFailure.WRONG_TYPE
            ) from exc
        return ChatReply(text=text.strip(), prompt_tokens=tokens[0], completion_tokens=tokens[1],
                         reasoning_tokens=reasoning)


def _with_detail(message: dict, detail: str) -> dict:
    """`message` with `detail` on each of its image parts."""
    if not isinstance(message.get("content"), list):
        return message
    parts = [{**part, "image_url": {**part["image_url"], "detail": detail}} if part.get("type") == "image_url"
             else part for part in message["content"]]
    return {**message, "content": parts}
