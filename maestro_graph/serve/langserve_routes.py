"""LangServe routes (`add_routes`) over the same episode service as the OpenAI endpoint, so the key, the image
policy, the episode cap and the timeout hold there too. Imported only when the `langserve` extra is installed."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from langchain_core.runnables import Runnable, RunnableLambda
from langserve import add_routes
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from .episodes import Episode, EpisodeService
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
    steps: list[dict[str, Any]]
    thread_id: str | None = None


def maestro_runnable(service: EpisodeService) -> Runnable:
    """A runnable that answers one MaestroRequest through the service (its worker pool, cap and timeout)."""

    async def answer(request: MaestroRequest | dict) -> MaestroResponse:
        req = request if isinstance(request, MaestroRequest) else MaestroRequest.model_validate(request)
        images = await run_in_threadpool(resolve_images, req.images, service.settings)
        context = service.context(policy=req.policy, max_turns=req.max_turns, max_cost=None)
        outcome = await service.complete(Episode(req.question, images, req.choices, context, service.thread_for(None)))
        return MaestroResponse(answer=outcome.answer, stop_reason=outcome.stop_reason, steps=outcome.steps,
                               thread_id=outcome.thread_id)

    return RunnableLambda(answer, name="maestro").with_types(input_type=MaestroRequest, output_type=MaestroResponse)


def mount_langserve(app: FastAPI, service: EpisodeService, path: str, auth: Any) -> None:
    """`/maestro/invoke`, `/stream`, the schemas and the playground, behind the API key when one is set."""
    add_routes(
        app, maestro_runnable(service), path=path, dependencies=[auth],
        enabled_endpoints=["invoke", "batch", "stream", "input_schema", "output_schema", "config_schema", "playground"],
    )
