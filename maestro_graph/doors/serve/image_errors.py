"""The server's side of the image-source policy (maestro_graph.images.sources): a refusal becomes the OpenAI-style
error the client sees, with the status that says why (400, 413; 503 with Retry-After when the process's decode budget
had no room in time); and the limits over a whole conversation, whose earlier turns carry images too."""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool

from ...episode.conversation import MAX_HISTORY_TURNS
from ...images.sources import ImageRefused
from ...types import Turn
from .protocol import ApiError
from .settings import ServeSettings

__all__ = ["resolve_conversation", "resolve_images"]


def resolve_images(urls: list[str], settings: ServeSettings) -> list[str]:
    """Verified data URLs for the image references of one request, or an ApiError naming the bad one."""
    try:
        return settings.image_sources().resolve(urls)
    except ImageRefused as exc:
        retry = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
        raise ApiError(exc.status, exc.code, str(exc), param=exc.param, headers=retry) from exc


async def resolve_conversation(images: list[str], turns: list[Turn], settings: ServeSettings, *,
                               within_s: float) -> tuple[list[str], list[Turn]]:
    """The question's images and its history's, verified as one request, within `within_s` seconds. Only the latest
    `MAX_HISTORY_TURNS` turns are kept (the graph reads no earlier one), so an older turn's images are neither
    decoded nor stored; the distinct images of the question and of those turns together count toward `max_images`
    (an image repeated in several turns counts once: it is decoded and stored once); verifying them (fetching,
    decoding) runs inside the request's deadline, a 504 when it does not finish in time (the decode under way
    finishes in the background, within the process's decode budget)."""
    kept = turns[-MAX_HISTORY_TURNS:]
    distinct = set(images) | {url for turn in kept for url in turn.get("images") or []}
    if len(distinct) > settings.max_images:
        raise ApiError(413, "too_many_images", f"{len(distinct)} distinct images in the question and the latest "
                       f"{len(kept)} turns of its history exceed the cap of {settings.max_images} (--max-images); "
                       "an image repeated in several turns counts once", param="messages")

    def verified() -> tuple[list[str], list[Turn]]:
        return resolve_images(images, settings), [
            Turn(**{**turn, "images": resolve_images(turn["images"], settings)}) if turn.get("images") else turn
            for turn in kept]

    try:
        return await asyncio.wait_for(run_in_threadpool(verified), timeout=max(within_s, 0.0))
    except TimeoutError:
        raise ApiError(504, "timeout", f"the request's images were not verified within its "
                       f"{settings.request_timeout_s:g} s (--timeout-s); nothing ran") from None
