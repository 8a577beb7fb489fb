"""The server's side of the image-source policy (maestro_graph.images.sources): a refusal becomes the OpenAI-style
error the client sees, with the status that says why (400, 413; 503 with Retry-After when the process's decode budget
had no room in time)."""

from __future__ import annotations

from ..images.sources import ImageRefused
from .protocol import ApiError
from .settings import ServeSettings

__all__ = ["resolve_images"]


def resolve_images(urls: list[str], settings: ServeSettings) -> list[str]:
    """Verified data URLs for the image references of one request, or an ApiError naming the bad one."""
    try:
        return settings.image_sources().resolve(urls)
    except ImageRefused as exc:
        retry = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
        raise ApiError(exc.status, exc.code, str(exc), param=exc.param, headers=retry) from exc
