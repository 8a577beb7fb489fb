"""The OpenAI chat-completions wire format as far as Maestro speaks it, and the one error type the app returns.

A body names only fields the door knows, as OpenAI's API does: OpenAI's own parameters (`OPENAI_PARAMETERS`; those
that do not apply to an episode, such as `temperature`, are accepted and ignored) and Maestro's (`thread_id`,
`choices`, and the run settings every door validates alike, `episode.context.RunSettings`); any other is a 400
naming it. The last user message must hold text and/or `image_url` parts; other part types are refused; a body
nested deeper than `MAX_JSON_DEPTH` or with more choices than the caps is refused before anything runs; and the
parameters that would change the reply's form (`tools`, `tool_choice`, `response_format`...) are refused, since an
episode answers in plain text only and silently ignoring them breaks clients that rely on them.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ...episode.context import RunSettings
from ...types import Turn

__all__ = [
    "ApiError",
    "ChatMessage",
    "ChatRequest",
    "StreamOptions",
    "ParsedRequest",
    "parse_request",
    "completion_body",
    "NO_ANSWER",
    "reply_message",
    "chunk_body",
    "new_completion_id",
    "THREAD_ID_PATTERN",
    "MAX_JSON_DEPTH",
    "MAX_CHOICES",
    "MAX_CHOICE_CHARS",
    "Choices",
    "OPENAI_PARAMETERS",
    "parse_json",
]

THREAD_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in a request body (a chat request needs 5 levels, a LangServe one
about 6): deeper bodies are refused before anything walks them recursively."""
MAX_CHOICES = 64
"""Most multiple-choice options in one request."""
MAX_CHOICE_CHARS = 1000
"""Longest multiple-choice option, in characters (an option is echoed into prompts, traces and answers)."""

Choices = Annotated[
    list[Annotated[str, StringConstraints(max_length=MAX_CHOICE_CHARS)]],
    Field(max_length=MAX_CHOICES, description=f"multiple-choice options (at most {MAX_CHOICES}, each at most "
          f"{MAX_CHOICE_CHARS} characters); the answer is the option's text"),
]
"""The `choices` of a request on every HTTP door, with its caps."""


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


OPENAI_PARAMETERS = frozenset({
    "audio", "frequency_penalty", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
    "modalities", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "reasoning_effort",
    "safety_identifier", "seed", "service_tier", "stop", "store", "temperature", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options",
})
"""OpenAI chat-completions parameters that do not change an episode (it samples no tokens of its own): accepted, so
any OpenAI client's defaults work, and ignored. Those that would change the reply's form are fields of
`ChatRequest` and refused when asked for (`unsupported_parameter`)."""


class ChatRequest(RunSettings):
    """`/v1/chat/completions` body. The Maestro extensions (`thread_id`, `choices`, and the run settings `policy`,
    `max_turns`, `max_cost`, `min_confidence`) are optional; OpenAI clients send them through `extra_body`. Any
    field that is neither OpenAI's nor Maestro's is refused (`unknown_parameter`), as OpenAI refuses one: a
    misspelt setting (`min_confidance`) must not be ignored."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, description="choices to generate; an episode has one answer, so only 1 is served")
    thread_id: str | None = Field(None, pattern=THREAD_ID_PATTERN)
    choices: Choices | None = None
    tools: Any = None
    functions: Any = None
    tool_choice: Any = None
    function_call: Any = None
    response_format: Any = None

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, body: Any) -> Any:
        """OpenAI's parameters that do not apply are dropped here; any other unknown field is refused with OpenAI's
        own message for it."""
        if not isinstance(body, dict):
            return body
        unknown = sorted(k for k in body if k not in cls.model_fields and k not in OPENAI_PARAMETERS)
        if unknown:
            raise ApiError(400, "unknown_parameter", f"Unrecognized request argument supplied: {unknown[0]} (Maestro "
                           "takes OpenAI's chat-completions parameters and its own: thread_id, choices, "
                           f"{', '.join(RunSettings.model_fields)})", param=unknown[0])
        return {k: v for k, v in body.items() if k in cls.model_fields}

    def unsupported_parameter(self) -> ApiError | None:
        """The 400 for a parameter asking for a reply form an episode cannot give (tool calls, JSON output), or None.
        Their neutral values (`tool_choice: "none"`, `response_format: {"type": "text"}`) are accepted."""
        asked = {
            "tools": bool(self.tools), "functions": bool(self.functions),
            "tool_choice": self.tool_choice not in (None, "none"),
            "function_call": self.function_call not in (None, "none"),
            "response_format": self.response_format is not None and self.response_format != {"type": "text"},
        }
        name = next((n for n, on in asked.items() if on), None)
        if name is None:
            return None
        return ApiError(400, "unsupported_parameter", f"`{name}` is not supported: an episode answers in plain text "
                        "(no tool calls, no JSON output modes); leave it out and read the answer from "
                        "`choices[0].message.content`", param=name)


class ParsedRequest(BaseModel):
    """The question and image references taken from the last user message, and the conversation before it."""

    question: str
    image_urls: list[str]
    history: list[Turn] = Field(default_factory=list)
    """The earlier user questions (with the images they sent) and the assistant answers that followed them (their
    text parts), oldest first: what a follow-up ("How many letters does it have?", "Do any two of them touch?")
    refers to."""


def _history(messages: list[ChatMessage]) -> list[Turn]:
    """Earlier turns of a chat: each user message's text is a question and its `image_url` parts its images, the
    next assistant message's text its answer; system, developer and tool messages and other parts are not part of
    the conversation's content."""
    turns: list[Turn] = []
    for message in messages:
        content = message.content
        parts = [] if isinstance(content, str) else content or []
        text = content if isinstance(content, str) else "\n".join(
            p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str))
        if message.role == "user":
            images = [url for p in parts if p.get("type") == "image_url" for url in [_url(p.get("image_url"))]
                      if isinstance(url, str) and url]
            turn = Turn(question=text, answer=None)
            if images:
                turn["images"] = images
            turns.append(turn)
        elif message.role == "assistant" and turns and turns[-1]["answer"] is None:
            turns[-1]["answer"] = text or None
    return turns


def _url(ref: Any) -> Any:
    """The URL of an `image_url` part's value (`{"url": ...}`, or the bare string some clients send)."""
    return ref.get("url") if isinstance(ref, dict) else ref


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
    history = _history(request.messages[:index])
    if isinstance(content, str):
        return ParsedRequest(question=content, image_urls=[], history=history)
    texts, urls = [], []
    for j, part in enumerate(content):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            url = _url(part.get("image_url"))
            if not isinstance(url, str) or not url:
                raise ApiError(400, "invalid_image_url", "an image_url part needs {\"url\": \"...\"}",
                               param=f"{param}.{j}")
            urls.append(url)
        else:
            raise ApiError(400, "unsupported_content_type",
                           f"content part type {kind!r} is not supported; send `text` and `image_url` parts",
                           param=f"{param}.{j}")
    return ParsedRequest(question="\n".join(t for t in texts if t), image_urls=urls, history=history)


class _LongInteger(Exception):
    def __init__(self, digits: int):
        super().__init__(digits)
        self.digits = digits


def _integer(text: str) -> int:
    """JSON's integers, refused past the digits Python converts (`sys.get_int_max_str_digits()`): `int()` would
    raise a bare ValueError there, which reached clients as a 500."""
    digits = len(text.lstrip("-"))
    if digits > sys.get_int_max_str_digits() > 0:
        raise _LongInteger(digits)
    return int(text)


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body, or a 400 naming why not (malformed, an integer longer than Python
    converts, or nested deeper than `MAX_JSON_DEPTH`). The depth is measured without recursion, so no body can
    exhaust the stack."""
    value = None
    try:
        value = json.loads(raw, parse_int=_integer)
        too_deep = _deeper_than(value, MAX_JSON_DEPTH)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON ({exc})") from exc
    except _LongInteger as exc:
        raise ApiError(400, "integer_too_long", f"the request body holds an integer of {exc.digits:,} digits, above "
                       f"the {sys.get_int_max_str_digits():,} digits a number here may have; no valid request "
                       "needs one") from None
    except RecursionError:  # deeper than the decoder's own stack allows
        too_deep = True
    if too_deep:
        raise ApiError(400, "json_too_deep", f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} "
                       "levels deep; no valid request does")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                pending.append((child, depth + 1))
    return False


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


NO_ANSWER = "no_answer"
"""The `finish_reason` of an episode that ended without an answer (its budget spent, its answer withheld below
`min_confidence`, nothing in reach): the message's `content` is null and its `refusal` says why, as OpenAI's own
replies do when the model declines; `maestro.stop` and `maestro.stop_reason` give the reason typed and in full."""


def reply_message(answer: str | None, stop_reason: str) -> dict[str, Any]:
    """The assistant message of an episode: its answer as `content`, or, with none, null `content` and a `refusal`
    naming the stop reason (an empty string would read as an empty answer)."""
    if answer is not None:
        return {"role": "assistant", "content": answer}
    return {"role": "assistant", "content": None,
            "refusal": f"No answer: the episode ended without one ({stop_reason})"}


def completion_body(completion_id: str, model: str, answer: str | None, trace: dict[str, Any],
                    usage: dict[str, int]) -> dict[str, Any]:
    """A `chat.completion` object; the episode's steps and cost travel in the extra `maestro` field. An episode
    without an answer finishes with `NO_ANSWER`."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": reply_message(answer, trace["stop_reason"]),
            "finish_reason": "stop" if answer is not None else NO_ANSWER,
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
