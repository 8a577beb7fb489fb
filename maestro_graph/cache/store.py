"""A persistent cache of expert calls and of whole skill steps, so repeated episodes (oracle, evaluation,
rollouts, training) are cheap: a local directory (the default), or a Redis server that every worker of a cluster
shares, behind one backend interface (`backends.py`) with the same keys, encoding and statistics.

Expert calls are keyed by model name and card version, method and arguments (images by pixel content); steps by
model and card version, skill and a hash of its folder's files, the request and the image files' bytes. Only
successes are stored; a card with `cacheable: false` is never cached. Entries are written atomically (temp
file + rename); an unreadable entry is reported as corrupt, removed and recomputed, never silently used.

A cache can only help: a store that cannot be read or written (a read-only or full disk, a folder another user
owns, a lost Redis whose local fallback fails too) is a miss, never a failed call or step. The process warns once
(logger `maestro.cache`) and counts every such failure in `CacheStats.errors`, which batch runs write to their
metrics file (`maestro_cache_errors_total`).

Entries are JSON, never pickles (docs/security.md): a planted file in the cache folder must not run
code. Values other than JSON's own (tuples, dicts with any keys, numeric numpy arrays and scalars, the result
types of the built-in experts, the step record) carry an explicit type tag, and a tag is resolved only through the
allow-list `CACHEABLE_TYPES`, never by importing a name written in the entry. A value with anything else inside is
not stored: its call simply runs uncached.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..digests import Uncacheable
from ..errors import ConfigError, ExpertFailure
from ..experts.opencv_vision import Circle, CirclePair, Color, Crossing, Grid, Polygon
from ..experts.protocols import Barcode, ChatReply, TextBox
from ..types import ErrorKind, Step
from .backends import DEFAULT_TTL_S, CacheBackend, DirectoryBackend, RedisBackend

__all__ = ["ExpertCache", "CacheStats", "CACHEABLE_TYPES", "open_cache"]

log = logging.getLogger("maestro.cache")

CACHEABLE_TYPES: tuple[type, ...] = (TextBox, ChatReply, Barcode, Color, Circle, CirclePair, Polygon, Crossing,
                                     Grid, Step, ErrorKind, ExpertFailure)
"""The only classes (dataclasses, pydantic models, enums) an entry may name: what the built-in experts' methods
return, and the step record. An expert returning another class is not cached until its class is added here."""
_FORMAT = 1
"""Written in every entry; an entry of another format is corrupt (recomputed), so a format change needs no
migration."""
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
    errors: int = 0
    """Reads, writes and removals the store failed (OSError: the disk, the folder's rights, the fallback of a lost
    Redis); each was a miss or an entry not stored."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ExpertCache:
    """The expert-call cache over a backend: a directory (given a path) or any CacheBackend (Redis). The backend
    stores bytes; the JSON encoding, the statistics and the corrupt-entry rule are the same for all of them."""

    def __init__(self, root: str | Path | CacheBackend):
        self.backend: CacheBackend = DirectoryBackend(root) if isinstance(root, (str, os.PathLike)) else root
        self.stats = CacheStats()
        self._failure_told = False
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The local directory: the cache itself, or a remote backend's fallback."""
        backend = self.backend
        return backend.root if isinstance(backend, DirectoryBackend) else backend.fallback.root  # type: ignore

    @property
    def location(self) -> str:
        return self.backend.location

    def _failed(self, doing: str, exc: OSError) -> None:
        """A store failure: counted, and told once per process (a read-only folder fails every call alike)."""
        self.stats.count("errors")
        with self._lock:
            told, self._failure_told = self._failure_told, True
        if told:
            return
        # the same words on every worker that meets the same failure (no entry's path), so Ray's log deduplication
        # shows a cluster's workers' warnings as one line with a count
        log.warning("expert cache %s: cannot %s an entry (%s: %s); expert calls and steps run uncached while it "
                    "fails (counted as cache errors, maestro_cache_errors_total)", self.location, doing,
                    exc.__class__.__name__, exc.strerror or exc)

    def get(self, key: str) -> tuple[bool, Any]:
        try:
            data = self.backend.read(key)
        except OSError as exc:
            self._failed("read", exc)
            data = None
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
            try:
                self.backend.delete(key)
            except OSError as exc:  # left in place: the next read finds it corrupt again
                self._failed("remove", exc)
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
        try:
            self.backend.write(key, payload.encode("utf-8"))
        except OSError as exc:
            self._failed("write", exc)

    def clear(self) -> int:
        """Remove every entry, old pickled ones included; returns how many there were."""
        return self.backend.clear()


def open_cache(cache_dir: str | Path, url: str | None = None, *, ttl_s: int = DEFAULT_TTL_S) -> ExpertCache:
    """The cache of the CLI and of cluster workers: `cache_dir` alone, or the Redis server at `url`
    (redis://HOST:PORT/DB) with `cache_dir` as its fallback and entries that expire `ttl_s` seconds after they are
    written (0: never; the directory's entries never expire)."""
    local = DirectoryBackend(cache_dir)
    if url is None:
        return ExpertCache(local)
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"cache URL {url!r} is not a Redis URL; use redis://HOST:PORT/DB", field="cache_url")
    return ExpertCache(RedisBackend(url, local, ttl_s=ttl_s))
