"""The OpenAI chat-completions wire format as far as Maestro speaks it, and the one error type the app returns.

Requests are parsed leniently (unknown OpenAI fields such as `temperature` are ignored) and validated strictly where
it matters: the last user message must hold text and/or `image_url` parts; other part types are refused.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApiError",
    "ChatMessage",
    "ChatRequest",
    "StreamOptions",
    "ParsedRequest",
    "parse_request",
    "completion_body",
    "chunk_body",
    "new_completion_id",
    "THREAD_ID_PATTERN",
]

THREAD_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


class ApiError(Exception):
    """An HTTP error with an OpenAI-style JSON body: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        if self.status == 401:
            return "authentication_error"
        if self.status == 429:
            return "rate_limit_error"
        if self.status >= 500:
            return "server_error"
        return "invalid_request_error"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False
    """Send a last chunk with `usage` (and no choices) before `[DONE]`, as OpenAI does."""


class ChatRequest(BaseModel):
    """`/v1/chat/completions` body. The Maestro extensions (`thread_id`, `choices`, `policy`, budgets) are optional;
    OpenAI clients send them through `extra_body`."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, description="choices to generate; an episode has one answer, so only 1 is served")
    thread_id: str | None = Field(None, pattern=THREAD_ID_PATTERN)
    choices: list[str] | None = Field(None, description="multiple-choice options (answered with the option text)")
    policy: str | None = None
    max_turns: int | None = Field(None, ge=1)
    max_cost: float | None = Field(None, ge=0)


class ParsedRequest(BaseModel):
    """The question and image references taken from the last user message."""

    question: str
    image_urls: list[str]


def parse_request(request: ChatRequest) -> ParsedRequest:
    """Question text and image URLs of the last user message; any other part type is the client's error."""
    index = next((i for i in range(len(request.messages) - 1, -1, -1) if request.messages[i].role == "user"), None)
    if index is None:
        raise ApiError(400, "no_user_message", "messages must contain a user message with the question",
                       param="messages")
    content = request.messages[index].content
    param = f"messages.{index}.content"
    if content is None:
        raise ApiError(400, "empty_content", "the user message has no content", param=param)
    if isinstance(content, str):
        return ParsedRequest(question=content, image_urls=[])
    texts, urls = [], []
    for j, part in enumerate(content):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str) or not url:
                raise ApiError(400, "invalid_image_url", "an image_url part needs {\"url\": \"...\"}",
                               param=f"{param}.{j}")
            urls.append(url)
        else:
            raise ApiError(400, "unsupported_content_type",
                           f"content part type {kind!r} is not supported; send `text` and `image_url` parts",
                           param=f"{param}.{j}")
    return ParsedRequest(question="\n".join(t for t in texts if t), image_urls=urls)


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion_body(completion_id: str, model: str, answer: str | None, trace: dict[str, Any],
                    usage: dict[str, int]) -> dict[str, Any]:
    """A `chat.completion` object; the episode's steps and cost travel in the extra `maestro` field."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer if answer is not None else ""},
            "finish_reason": "stop",
        }],
        "usage": usage,
        "maestro": trace,
    }


def chunk_body(completion_id: str, model: str, delta: dict[str, Any] | None, *, finish_reason: str | None = None,
               maestro: dict[str, Any] | None = None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk`; step events ride in the extra `maestro` field with an empty delta. The usage
    chunk (`stream_options.include_usage`) has `delta=None`: no choices, only `usage`."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    if maestro is not None:
        body["maestro"] = maestro
    return body
