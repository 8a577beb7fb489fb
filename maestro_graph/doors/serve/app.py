"""The OpenAI-compatible app: `/v1/models` (and `/v1/models/{id}`), `/v1/chat/completions` (plain and SSE
streaming, with `usage`), `/v1/threads/{id}`, `/healthz`, `/metrics` (Prometheus), and the LangServe routes when
the `langserve` extra is installed. Every response carries an `x-request-id`.

Every refusal is an OpenAI-style JSON error with the status that says whose fault it was; nothing a client sends
can take the server down, and episodes never run on the event loop.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Cookie, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...core.allocator import return_large_buffers
from ...core.question_text import EMPTY_QUESTION, clean_question, question_problem
from ...images.load import DECODE_MEMORY
from ...registry import Registry
from ...types import StopReason
from .checkpoint_db import CheckpointDb, ImageDb, open_checkpointer, open_image_store
from .client_gone import CHAT_ROUTE, CancelOnDisconnect, episode_routes
from .episodes import THREAD_HEADER, Episode, EpisodeOutcome, EpisodeService
from .image_errors import resolve_conversation
from .limits import BodyLimitMiddleware
from .observability import RequestIdMiddleware
from .observability import thread_id as thread_id_var
from .principals import principal_of
from .protocol import (
    NO_ANSWER,
    THREAD_ID_PATTERN,
    ApiError,
    ChatRequest,
    chunk_body,
    completion_body,
    new_completion_id,
    parse_json,
    parse_request,
    reply_message,
)
from .settings import ServeSettings

__all__ = ["create_app", "langserve_installed"]

log = logging.getLogger("maestro.serve")

KEY_COOKIE = "maestro_api_key"
"""The cookie that carries the API key for a browser on the LangServe playground (see `mount_langserve`)."""


def langserve_installed() -> bool:
    """Whether the optional `langserve` extra is importable (then its routes are mounted; /healthz says so)."""
    return importlib.util.find_spec("langserve") is not None


def create_app(registry: Registry, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app. Nothing loads until the first request needs an expert; the worker pool and the checkpoint
    database close with the app."""
    settings = settings or ServeSettings()
    DECODE_MEMORY.configure(settings.decode_memory_mb * 1_000_000)  # process-wide: decoding memory is the process's
    return_large_buffers()  # process-wide: a freed image goes back to the system, whichever thread held it
    db = settings.checkpoint_db
    checkpointer: CheckpointDb | None = None
    store: ImageDb | None = None
    if db:
        checkpointer = open_checkpointer(db)
        store = open_image_store(db, checkpointer, retention_days=settings.image_retention_days)
    service = EpisodeService(registry, settings, checkpointer=checkpointer, store=store)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()

    docs = settings.openapi_docs
    app = FastAPI(title="Maestro-Graph", version="1", lifespan=lifespan, openapi_url="/openapi.json" if docs else None,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None)
    app.state.service = service
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(CancelOnDisconnect, watched=episode_routes(settings.langserve_path))
    app.add_middleware(RequestIdMiddleware)  # added last, so outermost: a refused body gets an id too
    _install_error_handlers(app)

    def require_key(authorization: str | None = Header(None),
                    cookie_key: str | None = Cookie(None, alias=KEY_COOKIE, include_in_schema=False)) -> str | None:
        """The request's principal (None without keys): the key as a Bearer header, or as the cookie a browser got
        from the playground's `?api_key=` link (a browser cannot send the header)."""
        return principal_of(settings, authorization, cookie_key)

    _add_open_routes(app, service, settings)
    _add_model_routes(app, settings, Depends(require_key))

    @app.get("/v1/threads/{thread_id}")
    async def thread(thread_id: str, principal: str | None = Depends(require_key)) -> dict[str, Any]:
        return await run_in_threadpool(service.history, thread_id, principal)

    @app.post(CHAT_ROUTE)
    async def chat_completions(request: Request, principal: str | None = Depends(require_key)):
        return await _chat_completion(request, principal, service)

    if langserve_installed():
        from .langserve_routes import mount_langserve

        mount_langserve(app, service, settings.langserve_path, Depends(require_key), key_cookie=KEY_COOKIE)
    return app


def _add_open_routes(app: FastAPI, service: EpisodeService, settings: ServeSettings) -> None:
    """`/healthz` and `/metrics`, which need no key."""

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "episodes_in_flight": service.in_flight, "max_episodes": settings.max_episodes,
                "persistence": service.persistent, "langserve": langserve_installed()}

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus text format, unauthenticated like /healthz (scrapers rarely hold the API key; it holds no
        request data)."""
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _add_model_routes(app: FastAPI, settings: ServeSettings, key: Any) -> None:
    """`/v1/models` and `/v1/models/{id}`: the one model this server serves."""
    model_card = {"id": settings.model_name, "object": "model", "created": 0, "owned_by": "maestro-graph"}

    @app.get("/v1/models", dependencies=[key])
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card]}

    @app.get("/v1/models/{model_id}", dependencies=[key])
    def model(model_id: str) -> dict[str, Any]:
        if model_id != settings.model_name:
            raise ApiError(404, "model_not_found",
                           f"model {model_id!r} does not exist; this server serves {settings.model_name!r}",
                           param="model")
        return model_card


async def _chat_completion(request: Request, principal: str | None, service: EpisodeService) -> Response:
    """One `/v1/chat/completions` request: checked whole (body, model, parameters, question, thread, owner, a free
    slot) before any image is decoded, then answered plain or as a stream, all within the request's deadline
    (`request_timeout_s`, from its arrival: verifying the images counts)."""
    settings = service.settings
    deadline = time.monotonic() + settings.request_timeout_s
    body = await _json_body(request)
    try:
        chat = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise _validation_error(exc) from exc
    if chat.model != settings.model_name:
        raise ApiError(404, "model_not_found",
                       f"model {chat.model!r} does not exist; this server serves {settings.model_name!r}",
                       param="model")
    if (unsupported := chat.unsupported_parameter()) is not None:
        raise unsupported
    if chat.n != 1:
        raise ApiError(400, "n_not_supported", f"n={chat.n}: an episode gives one answer; send n=1 (or omit it) "
                       "and repeat the request for more", param="n")
    if len(chat.messages) > settings.max_messages:
        raise ApiError(413, "too_many_messages", f"{len(chat.messages)} messages exceed the cap of "
                       f"{settings.max_messages} (--max-messages); only a conversation's latest turns are read",
                       param="messages")
    parsed = parse_request(chat)
    header_thread = request.headers.get(THREAD_HEADER)
    may_have_image = bool(parsed.image_urls or any(t.get("images") for t in parsed.history)
                          or chat.thread_id or header_thread)
    problem = question_problem(clean_question(parsed.question), image=may_have_image)
    if problem:  # the graph's own check (too long, blank with no image to read), before an episode is admitted
        raise ApiError(400, _problem_code(problem), problem, param="messages")
    if header_thread is not None and not re.fullmatch(THREAD_ID_PATTERN, header_thread):
        raise ApiError(400, "invalid_thread_id", f"{THREAD_HEADER} must match {THREAD_ID_PATTERN}",
                       param="thread_id")
    if header_thread and chat.thread_id and header_thread != chat.thread_id:
        raise ApiError(400, "thread_id_conflict", f"the {THREAD_HEADER} header and `thread_id` differ",
                       param="thread_id")
    context = service.context(chat)
    requested_thread = chat.thread_id or header_thread
    if requested_thread is not None:  # another principal's thread is a 404, before anything else is said of it
        await run_in_threadpool(service.check_owner, requested_thread, principal)
    service.check_capacity(1, requested_thread)  # 409/429 before any image is decoded
    images, history = await resolve_conversation(parsed.image_urls, parsed.history, settings,
                                                 within_s=deadline - time.monotonic())
    episode = Episode(parsed.question, images, chat.choices, context, service.thread_for(requested_thread),
                      history=history, owner=principal, deadline=deadline)
    headers = {THREAD_HEADER: episode.thread_id} if episode.thread_id else {}
    thread_id_var.set(episode.thread_id)
    completion_id = new_completion_id()
    if not chat.stream:
        outcome = await service.complete(episode)
        _refused(outcome)
        return JSONResponse(completion_body(completion_id, settings.model_name, outcome.result.answer,
                                            outcome.trace(), outcome.usage), headers=headers)
    include_usage = chat.stream_options is not None and chat.stream_options.include_usage
    opened = await service.open_stream(episode)
    stream = _sse(completion_id, settings.model_name, opened, include_usage=include_usage)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _refused(outcome: EpisodeOutcome) -> None:
    """The 400 of an episode its input stopped before any expert answered (a question that needs an image and a
    conversation without one): the client must fix the request, and an empty answer would hide that."""
    result = outcome.result
    if result.stop == StopReason.INPUT_ERROR and result.answer is None:
        detail = result.stop_detail or result.stop_reason
        raise ApiError(400, _problem_code(detail), detail, param="messages",
                       headers={THREAD_HEADER: outcome.thread_id} if outcome.thread_id else None)


def _problem_code(problem: str) -> str:
    """The error code of a question the graph cannot use."""
    if problem.startswith(EMPTY_QUESTION):
        return "empty_request"
    return "question_too_long" if problem.startswith("the question has") else "input_error"


async def _sse(completion_id: str, model: str, stream: AsyncGenerator[dict[str, Any] | EpisodeOutcome, None], *,
               include_usage: bool) -> AsyncIterator[str]:
    """Steps as `maestro` chunks with an empty delta, then the answer as content, the usage chunk when asked for
    (`stream_options.include_usage`), then `[DONE]`. An error after the stream began is its last chunk (an episode
    its input stopped among them, `_refused`)."""

    def data(body: dict[str, Any]) -> str:
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    try:
        yield data(chunk_body(completion_id, model, {"role": "assistant", "content": ""}))
        async for item in stream:
            if not isinstance(item, EpisodeOutcome):
                yield data(chunk_body(completion_id, model, {}, maestro=item))
                continue
            _refused(item)
            answer = item.result.answer
            said = reply_message(answer, item.result.stop_reason)  # no answer: null content and a refusal
            yield data(chunk_body(completion_id, model, {k: v for k, v in said.items() if k != "role"}))
            yield data(chunk_body(completion_id, model, {}, finish_reason="stop" if answer is not None else NO_ANSWER,
                                  maestro={"event": "done", **item.trace()}))
            if include_usage:
                yield data(chunk_body(completion_id, model, None, usage=item.usage))
        yield "data: [DONE]\n\n"
    except ApiError as exc:
        yield data(exc.body())
    except Exception as exc:  # process boundary: the episode crashed; the client gets the error, the log the trace
        log.exception("episode failed")
        yield data(ApiError(500, "episode_failed", f"{exc.__class__.__name__}: {exc}").body())
    finally:
        await stream.aclose()  # a client gone mid-stream: the episode stops at its next step


async def _json_body(request: Request) -> Any:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ApiError(415, "unsupported_media_type",
                       f"send the request as application/json (got {content_type or 'no content type'!r})")
    return parse_json(await request.body())


def _validation_error(exc: ValidationError | RequestValidationError) -> ApiError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(p) for p in first["loc"] if p != "body") or None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return ApiError(400, "invalid_request", f"{param or 'body'}: {first['msg']}{more}", param=param)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(exc)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = ApiError(exc.status_code, f"http_{exc.status_code}", str(exc.detail))
        return JSONResponse(error.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crash(_: Request, exc: Exception) -> JSONResponse:  # process boundary: recorded, not swallowed
        log.exception("request failed")
        error = ApiError(500, "internal_error", f"{exc.__class__.__name__}: {exc}")
        return JSONResponse(error.body(), status_code=500)
