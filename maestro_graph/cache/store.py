"""A persistent cache of expert calls and of whole skill steps, so repeated episodes (oracle, evaluation,
rollouts, training) are cheap: a local directory (the default), or a Redis server that every worker of a cluster
shares (`RedisBackend`), behind one backend interface with the same keys, encoding and statistics.

Expert calls are keyed by model name and card version, method and arguments (images by pixel content); steps by
model and card version, skill and a hash of its folder's files, the request and the image files' bytes. Only
successes are stored; a card with `cacheable: false` is never cached. Entries are written atomically (temp
file + rename); an unreadable entry is reported as corrupt, removed and recomputed, never silently used.

Entries are JSON, never pickles (docs/security.md): a planted file in the cache folder must not run
code. Values other than JSON's own (tuples, dicts with any keys, numeric numpy arrays and scalars, the result
types of the built-in experts, the step record) carry an explicit type tag, and a tag is resolved only through the
allow-list `CACHEABLE_TYPES`, never by importing a name written in the entry. A value with anything else inside is
not stored: its call simply runs uncached.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
from pydantic import BaseModel

from ..digests import Uncacheable
from ..errors import ConfigError, ExpertFailure, ServiceUnavailable, import_extra
from ..experts.opencv_vision import Circle, CirclePair, Color, Crossing, Grid, Polygon
from ..experts.protocols import Barcode, ChatReply, TextBox
from ..types import ErrorKind, Step

__all__ = ["ExpertCache", "CacheStats", "CACHEABLE_TYPES", "CacheBackend", "DirectoryBackend", "RedisBackend",
           "open_cache"]

CACHEABLE_TYPES: tuple[type, ...] = (TextBox, ChatReply, Barcode, Color, Circle, CirclePair, Polygon, Crossing,
                                     Grid, Step, ErrorKind, ExpertFailure)
"""The only classes (dataclasses, pydantic models, enums) an entry may name: what the built-in experts' methods
return, and the step record. An expert returning another class is not cached until its class is added here."""
_FORMAT = 1
"""Written in every entry; an entry of another format is corrupt (recomputed), so a format change needs no
migration."""
_SUFFIX = ".json"
_OLD_SUFFIXES = (".pkl",)
"""Entries of earlier versions: never read (they were pickles), only removed by `clear()`."""
_NUMERIC_KINDS = "biufc"
"""numpy dtype kinds an entry may hold (bool, int, uint, float, complex): raw bytes, no objects."""
_SCALARS = (type(None), bool, int, float, str)
_TAGS: dict[type, str] = {cls: f"{cls.__module__}.{cls.__qualname__}" for cls in CACHEABLE_TYPES}
_CLASSES: dict[str, type] = {tag: cls for cls, tag in _TAGS.items()}


class _CorruptEntry(ValueError):
    """An entry that is not what this module writes (a foreign file, an unknown type tag, a bad array)."""




def _encode(value: Any) -> Any:
    """`value` as JSON data: JSON's own types as they are, everything else an object `{"t": tag, ...}`. Types are
    matched exactly, since a subclass (an enum, numpy's float64) would come back as its base class."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [_encode(v) for v in value]
    if kind is tuple:
        return {"t": "tuple", "v": [_encode(v) for v in value]}
    if kind is dict:
        return {"t": "dict", "v": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if kind is np.ndarray or isinstance(value, np.generic):  # an ndarray subclass (a masked array) is not stored
        array = np.asarray(value)
        if array.dtype.kind not in _NUMERIC_KINDS:
            raise Uncacheable(f"cannot store a numpy array of dtype {array.dtype} in the expert cache")
        return {"t": "ndarray" if kind is np.ndarray else "numpy-scalar", "dtype": array.dtype.str,
                "shape": list(array.shape), "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}
    tag = _TAGS.get(kind)
    if tag is None:
        raise Uncacheable(f"cannot store a value of type {kind.__name__} in the expert cache (not in CACHEABLE_TYPES)")
    if issubclass(kind, Enum):
        return {"t": tag, "v": _encode(value.value)}
    names = list(kind.model_fields) if issubclass(kind, BaseModel) else [f.name for f in fields(value)]
    return {"t": tag, "v": {name: _encode(getattr(value, name)) for name in names}}


def _decode(data: Any) -> Any:
    """The inverse of `_encode`; anything it would not have written raises (a corrupt entry)."""
    if type(data) is list:
        return [_decode(v) for v in data]
    if type(data) is not dict:
        return data
    tag = data["t"]
    if tag == "tuple":
        return tuple(_decode(v) for v in data["v"])
    if tag == "dict":
        return {_decode(k): _decode(v) for k, v in data["v"]}
    if tag in ("ndarray", "numpy-scalar"):
        dtype = np.dtype(data["dtype"])
        if dtype.kind not in _NUMERIC_KINDS:
            raise _CorruptEntry(f"numpy dtype {dtype} is not allowed")
        array = np.frombuffer(base64.b64decode(data["data"], validate=True), dtype=dtype).reshape(data["shape"])
        return array.copy() if tag == "ndarray" else array[()]
    cls = _CLASSES.get(tag)
    if cls is None:
        raise _CorruptEntry(f"unknown type tag {tag!r}")
    if issubclass(cls, Enum):
        return cls(_decode(data["v"]))
    values = {name: _decode(v) for name, v in data["v"].items()}
    return cls.model_validate(values) if issubclass(cls, BaseModel) else cls(**values)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    uncacheable: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CacheBackend(Protocol):
    """Where entries live: bytes by key. `read` returns None for a missing entry; `clear` removes every entry and
    returns how many there were; `location` names the store in messages. Encoding, statistics and the corrupt-entry
    rule stay in ExpertCache, so every backend stores the same keys the same way."""

    location: str

    def read(self, key: str) -> bytes | None: ...

    def write(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def clear(self) -> int: ...


class DirectoryBackend:
    """JSON files under `root/<2 hex>/<key>.json`. Shared safely by threads and processes (atomic renames)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.location = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{_SUFFIX}"

    def read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def clear(self) -> int:
        """Old pickled entries are counted and removed too."""
        count = 0
        if self.root.is_dir():
            count = sum(1 for suffix in (_SUFFIX, *_OLD_SUFFIXES) for _ in self.root.glob(f"*/*{suffix}"))
        shutil.rmtree(self.root, ignore_errors=True)
        return count


class RedisBackend:
    """Entries as Redis strings under `maestro:cache:<key>` on a server every worker of a cluster shares, so no
    worker repeats a call another one made. An unreachable server at start is a ServiceUnavailable naming the URL;
    the server going away later switches this process to the local `fallback` directory, with one warning, so a
    run degrades to per-machine caching instead of crashing."""

    PREFIX = "maestro:cache:"

    def __init__(self, url: str, fallback: DirectoryBackend):
        redis = import_extra("redis", "redis", "a Redis expert cache")
        self.url = url
        self.fallback = fallback
        self.location = url
        self._errors = (redis.RedisError, OSError)
        self._lock = threading.Lock()
        self._down = False
        try:
            self._client = redis.Redis.from_url(url, socket_timeout=_REDIS_TIMEOUT_S,
                                                socket_connect_timeout=_REDIS_TIMEOUT_S)
            self._client.ping()
        except (*self._errors, ValueError) as exc:
            raise ServiceUnavailable("Redis (expert cache)", url, str(exc) or exc.__class__.__name__) from None

    def _redis(self, command: Callable[[], Any], fallback: Callable[[], Any]) -> Any:
        """Run a Redis command, or its local `fallback` once the server has gone away (warned about once)."""
        if not self._down:
            try:
                return command()
            except self._errors as exc:
                with self._lock:
                    if not self._down:
                        self._down = True
                        warnings.warn(f"Redis expert cache at {self.url} is unreachable ({exc.__class__.__name__}); "
                                      f"using the local cache {self.fallback.location} for the rest of this run",
                                      stacklevel=4)
        return fallback()

    def read(self, key: str) -> bytes | None:
        return self._redis(lambda: self._client.get(self.PREFIX + key), lambda: self.fallback.read(key))

    def write(self, key: str, data: bytes) -> None:
        self._redis(lambda: self._client.set(self.PREFIX + key, data), lambda: self.fallback.write(key, data))

    def delete(self, key: str) -> None:
        self._redis(lambda: self._client.delete(self.PREFIX + key), lambda: self.fallback.delete(key))

    def clear(self) -> int:
        """Every entry of this cache on the server (other keys are left alone) and the local fallback's."""
        count = 0
        keys = list(self._client.scan_iter(match=self.PREFIX + "*", count=1000))
        for start in range(0, len(keys), 1000):
            count += self._client.delete(*keys[start:start + 1000])
        return count + self.fallback.clear()


_REDIS_TIMEOUT_S = 5.0
"""Socket timeouts of the Redis client: a dead server is noticed within this, not after TCP's minutes."""


class ExpertCache:
    """The expert-call cache over a backend: a directory (given a path) or any CacheBackend (Redis). The backend
    stores bytes; the JSON encoding, the statistics and the corrupt-entry rule are the same for all of them."""

    def __init__(self, root: str | Path | CacheBackend):
        self.backend: CacheBackend = DirectoryBackend(root) if isinstance(root, (str, os.PathLike)) else root
        self.stats = CacheStats()

    @property
    def root(self) -> Path:
        """The local directory: the cache itself, or a remote backend's fallback."""
        backend = self.backend
        return backend.root if isinstance(backend, DirectoryBackend) else backend.fallback.root  # type: ignore

    @property
    def location(self) -> str:
        return self.backend.location

    def get(self, key: str) -> tuple[bool, Any]:
        data = self.backend.read(key)
        if data is None:
            self.stats.count("misses")
            return False, None
        try:
            entry = json.loads(data)
            if type(entry) is not dict or entry.get("format") != _FORMAT:
                raise _CorruptEntry("not an entry of this cache format")
            value = _decode(entry["value"])
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:  # torn, foreign, planted
            self.stats.count("corrupt")
            self.stats.count("misses")
            warnings.warn(f"expert cache entry {key} in {self.location} is corrupt ({exc.__class__.__name__}); "
                          "recomputing", stacklevel=2)
            self.backend.delete(key)
            return False, None
        self.stats.count("hits")
        return True, value

    def put(self, key: str, value: Any) -> None:
        """Store `value`; one that cannot be written as JSON is counted in `stats.uncacheable` and not stored."""
        try:
            payload = json.dumps({"format": _FORMAT, "value": _encode(value)}, separators=(",", ":"))
        except (Uncacheable, RecursionError):
            self.stats.count("uncacheable")
            return
        self.backend.write(key, payload.encode("utf-8"))

    def clear(self) -> int:
        """Remove every entry, old pickled ones included; returns how many there were."""
        return self.backend.clear()


def open_cache(cache_dir: str | Path, url: str | None = None) -> ExpertCache:
    """The cache of the CLI and of cluster workers: `cache_dir` alone, or the Redis server at `url`
    (redis://HOST:PORT/DB) with `cache_dir` as its fallback."""
    local = DirectoryBackend(cache_dir)
    if url is None:
        return ExpertCache(local)
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"cache URL {url!r} is not a Redis URL; use redis://HOST:PORT/DB", field="cache_url")
    return ExpertCache(RedisBackend(url, local))
