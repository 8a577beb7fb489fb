"""Content hashes: cache keys of expert calls and skill steps (images by their pixels, everything else by value) and
digests of image references (a file's bytes, a data URL's text). Below everything that caches or compares items.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image

__all__ = ["Uncacheable", "cache_key", "file_digest"]


class Uncacheable(TypeError):
    """An argument has no stable content hash, or a result cannot be stored as JSON: the call runs uncached."""


def _canonical(value: Any) -> Any:
    if isinstance(value, Image.Image):
        digest = hashlib.sha256(value.tobytes()).hexdigest()
        return {"__image__": digest, "size": value.size, "mode": value.mode}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if is_dataclass(value) and not isinstance(value, type):
        return {"__dc__": type(value).__name__, **_canonical(asdict(value))}
    raise Uncacheable(f"cannot hash an argument of type {type(value).__name__}")


def cache_key(*parts: Any) -> str:
    """A content key: images by pixel hash, everything else by value (Uncacheable for other objects)."""
    payload = json.dumps(_canonical(list(parts)), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def file_digest(ref: str) -> str:
    """Content hash of an image reference: the file's bytes, or the data URL itself (missing file: its path)."""
    if ref.startswith("data:"):
        return hashlib.sha256(ref.encode()).hexdigest()
    try:
        stat = Path(ref).stat()
    except OSError:
        return f"unreadable:{ref}"
    return _file_digest(ref, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8192)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """Memoised by modification time and size, so a rewritten file is hashed again."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return f"unreadable:{path}"
