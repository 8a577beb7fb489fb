"""LangServe routes (`add_routes`) over the same episode service as the OpenAI endpoint, so the key, the image
policy, the episode cap and the timeout hold there too. Imported only when the `langserve` extra is installed."""

from __future__ import annotations

from typing import Any, AsyncIterator

from fastapi import FastAPI
from langchain_core.runnables import Runnable, RunnableGenerator
from langchain_core.runnables.utils import AddableDict
from langserve import add_routes
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from .episodes import Episode, EpisodeOutcome, EpisodeService
from .images import resolve_images

__all__ = ["MaestroRequest", "MaestroResponse", "maestro_runnable", "mount_langserve"]


class MaestroRequest(BaseModel):
    """One question about images (base64 data URLs, or http(s) URLs of allow-listed hosts)."""

    question: str = Field(description="the question about the images")
    images: list[str] = Field(default_factory=list, description="data:image/...;base64 URLs")
    choices: list[str] | None = Field(None, description="multiple-choice options, if any")
    policy: str | None = Field(None, description="a policy name overriding the server's")
    max_turns: int | None = Field(None, ge=1, description="turn budget (capped by the server's)")


class MaestroResponse(BaseModel):
    answer: str | None
    stop_reason: str
    steps: list[dict[str, Any]] = Field(default_factory=list)
    thread_id: str | None = None


def maestro_runnable(service: EpisodeService) -> Runnable:
    """A runnable that answers one MaestroRequest through the service (its worker pool, cap and timeout). It is a
    generator: each step streams as a chunk `{"steps": [step]}` as it happens and the last chunk holds the answer,
    stop reason and thread id; chunks add up (LangChain's AddableDict) to the MaestroResponse that `invoke`
    returns, and `stream_log`/`stream_events` (what the playground calls) see the same chunks."""

    async def answer(requests: AsyncIterator[MaestroRequest | dict]) -> AsyncIterator[AddableDict]:
        req = None
        async for req in requests:  # the input arrives whole, as one item
            pass
        req = req if isinstance(req, MaestroRequest) else MaestroRequest.model_validate(req)
        images = await run_in_threadpool(resolve_images, req.images, service.settings)
        context = service.context(policy=req.policy, max_turns=req.max_turns, max_cost=None)
        episode = Episode(req.question, images, req.choices, context, service.thread_for(None))
        async for item in await service.open_stream(episode):
            if isinstance(item, EpisodeOutcome):
                yield AddableDict(answer=item.answer, stop_reason=item.stop_reason, thread_id=item.thread_id)
            elif item.get("event") == "step":
                yield AddableDict(steps=[{k: v for k, v in item.items() if k != "event"}])

    return RunnableGenerator(answer, name="maestro").with_types(input_type=MaestroRequest, output_type=MaestroResponse)


def mount_langserve(app: FastAPI, service: EpisodeService, path: str, auth: Any) -> None:
    """`/maestro/invoke`, `/stream`, `/stream_log`, `/stream_events`, the schemas and the playground, behind the
    API key when one is set."""
    add_routes(
        app, maestro_runnable(service), path=path, dependencies=[auth],
        enabled_endpoints=["invoke", "batch", "stream", "stream_log", "stream_events", "input_schema",
                           "output_schema", "config_schema", "playground"],
    )
