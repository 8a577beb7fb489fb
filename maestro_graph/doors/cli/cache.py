"""`maestro cache clear`: empty the expert-call cache."""

from __future__ import annotations

from pathlib import Path

from ...errors import MaestroError
from .common import console, fail
from .options import CacheDirOpt, CacheUrlOpt

__all__ = ["cache_clear"]


def cache_clear(cache_dir: Path = CacheDirOpt, cache_url: str | None = CacheUrlOpt) -> None:
    """Delete every cached expert call (on the Redis server too, with --cache-url)."""
    from ...cache.store import open_cache

    try:  # clearing is an operation on the server itself: an unreachable one fails it, naming the URL
        cache = open_cache(cache_dir, cache_url)
        removed = cache.clear()
    except MaestroError as exc:
        fail(str(exc))
    console.print(f"removed {removed} entries from {cache.location}")
