"""A persistent on-disk cache of expert calls and of whole skill steps, so repeated episodes (oracle, evaluation,
rollouts, training) are cheap.

Expert calls are keyed by model name and card version, method and arguments (images by pixel content); steps by
model and card version, skill and a hash of its folder's files, the request and the image files' bytes. Only
successes are stored; a card with `cacheable: false` is never cached. Entries are written atomically (temp
file + rename); an unreadable entry is reported as corrupt, removed and recomputed, never silently used.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass, field, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image

__all__ = ["ExpertCache", "CacheStats", "cache_key", "file_digest", "Uncacheable"]


class Uncacheable(TypeError):
    """An argument has no stable content hash; the call runs uncached."""


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


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ExpertCache:
    """Files under `root/<2 hex>/<key>.pkl`. Shared safely by threads and processes (atomic renames)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.stats = CacheStats()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.pkl"

    def get(self, key: str) -> tuple[bool, Any]:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.stats.count("misses")
            return False, None
        try:
            value = pickle.loads(data)
        except Exception as exc:  # a torn or foreign file: report it, drop it, recompute
            self.stats.count("corrupt")
            self.stats.count("misses")
            warnings.warn(f"expert cache entry {path} is corrupt ({exc.__class__.__name__}); recomputing", stacklevel=2)
            path.unlink(missing_ok=True)
            return False, None
        self.stats.count("hits")
        return True, value

    def put(self, key: str, value: Any) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        count = sum(1 for _ in self.root.glob("*/*.pkl")) if self.root.is_dir() else 0
        shutil.rmtree(self.root, ignore_errors=True)
        return count
