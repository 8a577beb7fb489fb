"""LangServe routes (`add_routes`) over the same episode service as the OpenAI endpoint, so the key, the image
policy, the episode cap and the timeout hold there too. Imported only when the `langserve` extra is installed.

Everything a client can get wrong is refused before an episode starts and before a streamed response begins, with
the app's JSON error (LangServe would otherwise report it as a torn stream or a bare 500):

- the body (depth, schema, batch size) by a dependency of every route;
- the policy, the images and a free episode slot by `_prepare`, which runs for a single input inside LangServe's
  config step (`per_req_config_modifier`, before `stream`, `stream_log` or `stream_events` open their event stream)
  and for every input of a batch before any of them starts; the prepared `Episode` travels to the runnable in its
  config. A batch runs whole or not at all: if one of its episodes fails, the others are cancelled.

The playground is a browser page, and a browser cannot send the `Authorization` header: with an API key set, open
it once as `/maestro/playground/?api_key=KEY`; the server answers with a redirect to the same page that stores the
key in an HttpOnly, SameSite=Strict cookie limited to the LangServe path, which the page's own calls then carry.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import parse_qs

import orjson
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from langchain_core.runnables import Runnable, RunnableConfig, RunnableGenerator
from langchain_core.runnables.config import get_config_list, patch_config
from langchain_core.runnables.utils import AddableDict
from langgraph.types import Send as SendCall
from langserve import add_routes
from langserve.serialization import WellKnownLCSerializer
from langserve.serialization import default as lc_default
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ...core.question_text import clean_question, question_problem
from ...episode.context import RunSettings
from ...episode.state import AnswerSource
from .episodes import Episode, EpisodeOutcome, EpisodeService
from .image_errors import resolve_conversation
from .principals import principal_of
from .protocol import THREAD_ID_PATTERN, ApiError, Choices, parse_json

__all__ = ["MaestroRequest", "MaestroResponse", "maestro_runnable", "mount_langserve"]

_EPISODE = "maestro_episode"
"""The config key (under `configurable`) that carries a prepared Episode from the route to the runnable."""
_OWNER = "maestro_principal"
"""The config key (under `configurable`) that carries the request's principal (serve.principals) to the runnable."""


def _optional_without_null(schema: dict[str, Any]) -> None:
    """Leave the `null` default out of the JSON schema: the playground's form would offer it as the value and
    refuse it ("must be string"), while a field left out is simply not sent."""
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]


class MaestroRequest(RunSettings):
    """One question about one or more images, or a follow-up on a thread. The run settings (`policy`, `max_turns`,
    `max_cost`, `min_confidence`) are validated as on the OpenAI route (`RunSettings`), and any other unknown field
    is refused. Optional fields are plain types in the JSON schema (no `null` branch, no `null` default), which the
    playground's form can render."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_optional_without_null)

    question: str = Field(description="the question about the images")
    images: list[str] = Field(
        default_factory=list, description="data:image/...;base64 URLs (or http(s) URLs of allow-listed hosts); at "
        "least one image, here or as `image_file`, unless `thread_id` continues a conversation that has one")
    image_file: str | SkipJsonSchema[None] = Field(
        None, description="an image file as bare base64 (what the playground's upload button sends)",
        json_schema_extra={"extra": {"widget": {"type": "base64file"}}})
    choices: Choices | SkipJsonSchema[None] = None
    thread_id: Annotated[str, Field(pattern=THREAD_ID_PATTERN)] | SkipJsonSchema[None] = Field(
        None, description="continue this conversation (needs the server's --checkpoint-db): a question without "
        "images is about the thread's latest image, and a follow-up about an earlier answer is answered from it; "
        "the output's `thread_id` names the thread a run made")

    @model_validator(mode="after")
    def _some_image(self) -> MaestroRequest:
        """An image (or a thread that may hold one), and the graph's own check of the question (too long, or blank:
        a blank question is read from the image), made where the input enters, as a typed input error."""
        if self.image_file:  # the type is read from the bytes when the image is checked
            self.images = [*self.images, f"data:image/png;base64,{self.image_file}"]
            self.image_file = None
        if not self.images and self.thread_id is None:
            raise ValueError("the request has no image: send `images` (data URLs) or `image_file`, or the "
                             "`thread_id` of a conversation that has one")
        problem = question_problem(clean_question(self.question), image=True)
        if problem:
            raise ValueError(problem)
        return self


class MaestroResponse(BaseModel):
    answer: str | None
    answer_source: AnswerSource | None = None
    """Who gave the answer: the policy, the graph choosing an expert's candidate, or the graph's marked guess."""
    confidence: float | None = None
    """The probability that the answer is right."""
    stop_reason: str
    steps: list[dict[str, Any]] = Field(default_factory=list)
    thread_id: str | None = None
    content: str = Field("", description="the episode as text, one line per step and then the answer: each chunk "
                         "carries its line, and the chunks add up to this (what the playground shows as the output)")


def _step_line(step: dict[str, Any]) -> str:
    said = f"error: {step['error']}" if step.get("error") else step.get("answer") or "no answer"
    return f"{step.get('model')}@@{step.get('skill')}: {said}\n"


async def _prepare(service: EpisodeService, request: MaestroRequest | dict | None,
                   config: Mapping[str, Any]) -> Episode:
    """The episode of one input, with its policy checked and its images resolved (an ApiError otherwise; no input,
    None, is refused as a malformed one); its thread belongs to the principal the route put in the config."""
    req = request if isinstance(request, MaestroRequest) else MaestroRequest.model_validate(request)
    context = service.context(req)
    owner = config.get("configurable", {}).get(_OWNER)
    thread = service.thread_for(req.thread_id)  # a thread id without --checkpoint-db is a 400, never ignored
    if req.thread_id is not None:  # another principal's thread is a 404, before anything else is said of it
        await run_in_threadpool(service.check_owner, req.thread_id, owner)
    service.check_capacity(1, req.thread_id)  # a busy thread (409) or a full server (429) before any image decodes
    deadline = time.monotonic() + service.settings.request_timeout_s  # verifying the images counts
    images, _ = await resolve_conversation(req.images, [], service.settings, within_s=deadline - time.monotonic())
    return Episode(req.question, images, req.choices, context, thread, owner=owner, deadline=deadline)


def _with_episode(config: RunnableConfig, episode: Episode) -> RunnableConfig:
    return patch_config(config, configurable={**config.get("configurable", {}), _EPISODE: episode})


class _MaestroRunnable(RunnableGenerator):
    """The generator runnable, with a batch that is checked whole before any episode starts and cancelled whole
    when one of its episodes fails (LangChain's default batch leaves the others running)."""

    def __init__(self, service: EpisodeService, answer: Callable[..., AsyncIterator[AddableDict]]):
        super().__init__(answer, name="maestro")
        self._service = service

    async def abatch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        configs = get_config_list(config, len(inputs))
        self._service.check_capacity(len(inputs))  # before any input's images are decoded
        episodes = [await _prepare(self._service, item, c) for item, c in zip(inputs, configs)]
        runs = [self.ainvoke(item, _with_episode(c, e), **kwargs) for item, c, e in zip(inputs, configs, episodes)]
        if return_exceptions:
            return await asyncio.gather(*runs, return_exceptions=True)
        try:
            async with asyncio.TaskGroup() as group:  # the first failure cancels the rest (their episodes stop)
                tasks = [group.create_task(run) for run in runs]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [task.result() for task in tasks]


def maestro_runnable(service: EpisodeService) -> Runnable:
    """A runnable that answers one MaestroRequest through the service (its worker pool, cap and timeout). It is a
    generator: each step streams as a chunk `{"steps": [step], "content": line}` as it happens and the last chunk
    holds the answer, stop reason and thread id; chunks add up (LangChain's AddableDict) to the MaestroResponse that
    `invoke` returns, and `stream_log`/`stream_events` (what the playground calls) see the same chunks. Every chunk
    has a `content` string, so the playground, which shows chunks with one as one message (their contents joined),
    shows one output: the episode's lines, not the chunks' JSON objects glued together (`}{`). An input whose
    episode the route prepared (config `configurable.maestro_episode`) runs that episode; any other is prepared
    here."""

    async def answer(requests: AsyncIterator[MaestroRequest | dict],
                     config: RunnableConfig) -> AsyncIterator[AddableDict]:
        req = None
        async for req in requests:  # noqa: B007 (the input arrives whole, as one item: `req` is kept)
            pass
        episode = config.get("configurable", {}).get(_EPISODE)
        if not isinstance(episode, Episode):
            episode = await _prepare(service, req, config)
        stream = await service.open_stream(episode)
        try:
            async for item in stream:
                if isinstance(item, EpisodeOutcome):
                    answer, reason = item.result.answer, item.result.stop_reason
                    yield AddableDict(answer=answer, answer_source=item.result.answer_source,
                                      confidence=item.result.confidence, stop_reason=reason,
                                      thread_id=item.thread_id,
                                      content=f"answer: {answer}" if answer is not None else f"no answer ({reason})")
                elif item.get("event") == "step":
                    step = {k: v for k, v in item.items() if k != "event"}
                    yield AddableDict(steps=[step], content=_step_line(step))
        finally:
            await stream.aclose()  # a client gone mid-stream: its episode is cancelled now, not when collected

    return _MaestroRunnable(service, answer).with_types(input_type=MaestroRequest, output_type=MaestroResponse)


class _Serializer(WellKnownLCSerializer):
    """LangServe's serializer, which also writes a LangGraph `Send` (the router's hand-off of a call to its skill node,
    in the node output that `stream_log` and `stream_events` report of each inner run) as `{"node", "arg"}`; LangServe's
    own fails on it, tearing the stream with a 500."""

    def dumps(self, obj: Any) -> bytes:
        return orjson.dumps(obj, default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, SendCall):
        return {"node": obj.node, "arg": obj.arg}
    return lc_default(obj)


def _checked_body(service: EpisodeService) -> Callable[[Request], Any]:
    """A route dependency that refuses a body no route should walk: malformed or too deep JSON, an input that
    fails the schema (also in a batch, which LangServe would report as a 500), a batch above the episode cap."""

    async def check(request: Request) -> None:
        if request.method != "POST":
            return
        body = parse_json(await request.body())
        if not isinstance(body, dict):
            return  # LangServe's own validation answers
        inputs = body.get("inputs")
        if isinstance(inputs, list) and len(inputs) > service.settings.max_episodes:
            raise ApiError(413, "batch_too_large", f"a batch of {len(inputs)} inputs exceeds the "
                           f"{service.settings.max_episodes} episodes this server runs at once; split it",
                           param="inputs")
        located = [(("input",), body["input"])] if "input" in body else \
            [(("inputs", i), item) for i, item in enumerate(inputs)] if isinstance(inputs, list) else []
        for loc, item in located:
            try:
                MaestroRequest.model_validate(item)
            except ValidationError as exc:
                raise RequestValidationError([{**e, "loc": (*loc, *e["loc"])} for e in exc.errors()]) from None

    return check


def _preparing(service: EpisodeService, key_cookie: str) -> Callable[[dict[str, Any], Request], Any]:
    """LangServe's per-request config step, which runs before a route starts its response: the request's
    principal goes into the config, and a single input's episode is prepared and a slot checked here, so a refusal
    is the route's own HTTP error."""

    async def modify(config: dict[str, Any], request: Request) -> dict[str, Any]:
        principal = principal_of(service.settings, request.headers.get("authorization"),
                                 request.cookies.get(key_cookie))
        config = {**config, "configurable": {**config.get("configurable", {}), _OWNER: principal}}
        body = await request.json()
        if not (isinstance(body, dict) and "input" in body):
            return config  # a batch prepares its inputs in `abatch`
        episode = await _prepare(service, body["input"], config)
        service.check_capacity(1)
        return {**config, "configurable": {**config["configurable"], _EPISODE: episode}}

    return modify


class _PlaygroundKey:
    """ASGI middleware: `GET <playground>/...?api_key=KEY` with the right key answers a 303 to the same page
    without the query, setting the key as a cookie for the LangServe path (see the module docstring). A wrong key
    passes through to the route, which answers 401."""

    def __init__(self, app: ASGIApp, *, path: str, playground: str, cookie: str,
                 keys: Callable[[], tuple[str, ...]]):
        self.app, self.path, self.playground, self.cookie, self.keys = app, path, playground, cookie, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith(self.playground):
            given = parse_qs(scope["query_string"].decode("latin-1")).get("api_key", [""])[0]
            matches = [hmac.compare_digest(given.encode(), key.encode()) for key in self.keys()]  # each compared
            if given and any(matches):
                response = RedirectResponse(scope["path"], status_code=303)
                response.set_cookie(self.cookie, given, path=self.path, httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mount_langserve(app: FastAPI, service: EpisodeService, path: str, auth: Any, *, key_cookie: str) -> None:
    """`/maestro/invoke`, `/batch`, `/stream`, `/stream_log`, `/stream_events`, the schemas and the playground,
    behind the API key when one is set (as a header, or as the `key_cookie` cookie the playground link sets). A
    client that leaves `/invoke` or `/batch` before its answer cancels its episodes, as one leaving a stream does."""
    dependencies: Sequence[Any] = [auth, Depends(_checked_body(service))]
    add_routes(
        app, maestro_runnable(service), path=path, dependencies=dependencies,
        per_req_config_modifier=_preparing(service, key_cookie), serializer=_Serializer(),
        enabled_endpoints=["invoke", "batch", "stream", "stream_log", "stream_events", "input_schema",
                           "output_schema", "config_schema", "playground"],
    )
    app.add_middleware(_PlaygroundKey, path=path, playground=f"{path}/playground", cookie=key_cookie,
                       keys=service.settings.api_keys)
