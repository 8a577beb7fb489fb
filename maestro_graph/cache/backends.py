"""Where the expert cache's entries live: a local directory, or a Redis server that every worker of a cluster
shares, behind one interface of bytes by key. Encoding, statistics and the corrupt-entry rule are the cache's
(`store.ExpertCache`), so every backend stores the same keys the same way.

Redis is a service that comes and goes: a replica that lost it writes to its local directory only while it is gone,
probes it in the background with a growing delay, and goes back to it when it answers (docs/scale.md: The Redis
cache). Its keys expire after a TTL, so entries of retired card versions do not pile up on the server.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, ServiceUnavailable, import_extra

__all__ = ["CacheBackend", "DirectoryBackend", "RedisBackend", "DEFAULT_TTL_S"]

log = logging.getLogger("maestro.cache")

_SUFFIX = ".json"
_OLD_SUFFIXES = (".pkl",)
"""Entries of earlier versions: never read (they were pickles), only removed by `clear()`."""
DEFAULT_TTL_S = 7 * 24 * 3600
"""How long a Redis entry lives after it is written (`--cache-ttl-s`): long enough that a week of evaluations and
rollouts replays from the cache, short enough that the keys of replaced cards and skills leave the server."""
_REDIS_TIMEOUT_S = 5.0
"""Socket timeouts of the Redis client: a dead server is noticed within this, not after TCP's minutes."""
_PROBE_FIRST_S = 1.0
_PROBE_MAX_S = 8.0
"""The delay between probes of a Redis server that went away: doubled after each failed probe up to this, so a
server back after a long outage is in use again within seconds, and a dead one costs a ping every few seconds."""


class CacheBackend(Protocol):
    """Where entries live: bytes by key. `read` returns None for a missing entry; `clear` removes every entry and
    returns how many there were; `location` names the store in messages."""

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
    """Entries as Redis strings under `maestro:cache:<key>`, each expiring `ttl_s` seconds after it was written
    (0: never), on a server every worker of a cluster shares, so no worker repeats a call another one made.

    The cache only helps, so one rule holds whenever the server is unreachable, at start or later: this process
    uses the local `fallback` directory (one warning naming the URL) instead of failing a command or a call; while
    the server is away no call waits on it: a background thread pings it, at most once per delay (1 s doubling to
    8 s) and only while the cache is used, and the first answer switches the process back (one more warning). A
    server that answers but refuses a command (full under `maxmemory-policy noeviction`, a read-only replica) is not
    gone: that entry is simply not cached (a miss), with one warning per process; one that refuses this process at
    start (a wrong password) is a misconfiguration, a ServiceUnavailable naming the URL, as is a URL the client
    cannot parse (a ConfigError)."""

    PREFIX = "maestro:cache:"

    def __init__(self, url: str, fallback: DirectoryBackend, *, ttl_s: int = DEFAULT_TTL_S):
        if ttl_s < 0:
            raise ConfigError(f"{ttl_s} is negative; give the seconds an entry lives, or 0 to keep entries until "
                              "Redis evicts them", field="cache_ttl_s")
        redis = import_extra("redis", "redis", "a Redis expert cache")
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        self.fallback = fallback
        self.location = url
        self.ttl_s = ttl_s
        self._errors = (redis.RedisError, OSError)
        self._gone = (redis.ConnectionError, redis.TimeoutError, OSError)
        self._lock = threading.Lock()
        self._refusal_told = False
        self._up = True
        self._probing = False
        self._delay_s = _PROBE_FIRST_S
        self._probe_at = 0.0
        try:
            # one immediate retry: a pooled connection the server closed (a restart) is replaced, not reported; the
            # client's default (ten, with backoff) would hold a call for up to ten socket timeouts
            self._client = redis.Redis.from_url(url, socket_timeout=_REDIS_TIMEOUT_S,
                                                socket_connect_timeout=_REDIS_TIMEOUT_S, retry=Retry(NoBackoff(), 1))
        except ValueError as exc:
            raise ConfigError(f"cache URL {url!r}: {exc}; use redis://HOST:PORT/DB", field="cache_url") from None
        try:
            self._client.ping()
        except self._gone as exc:  # unreachable at start: as when it goes away later
            self._went_away(exc)
        except self._errors as exc:
            raise ServiceUnavailable("Redis (expert cache)", url, str(exc) or exc.__class__.__name__) from None

    def _redis(self, command: Callable[[], Any], fallback: Callable[[], Any]) -> Any:
        """Run a Redis command, or its local `fallback` while the server is away; None when the server refused it."""
        if self._up:
            try:
                return command()
            except self._gone as exc:
                self._went_away(exc)
            except self._errors as exc:
                self._refused(exc)
                return None
        else:
            self._probe_when_due()
        return fallback()

    def _went_away(self, exc: BaseException) -> None:
        with self._lock:
            if not self._up:
                return
            self._up = False
            self._delay_s = _PROBE_FIRST_S
            self._probe_at = time.monotonic() + self._delay_s
        log.warning("Redis expert cache at %s is unreachable (%s); using the local cache %s until it answers again",
                    self.url, exc.__class__.__name__, self.fallback.location)

    def _refused(self, exc: BaseException) -> None:
        with self._lock:
            if self._refusal_told:
                return
            self._refusal_told = True
        log.warning("Redis expert cache at %s refused a command (%s: %s); entries it refuses are not cached (a full "
                    "server needs an eviction policy: docs/scale.md, The Redis cache)", self.url,
                    exc.__class__.__name__, exc)

    def _probe_when_due(self) -> None:
        """Start a background ping when the delay has passed and none is running: the caller never waits on it."""
        with self._lock:
            if self._probing or time.monotonic() < self._probe_at:
                return
            self._probing = True
        threading.Thread(target=self._probe, name="maestro-redis-probe", daemon=True).start()

    def _probe(self) -> None:
        try:
            self._client.ping()
        except self._errors:
            with self._lock:
                self._delay_s = min(2 * self._delay_s, _PROBE_MAX_S)
                self._probe_at = time.monotonic() + self._delay_s
                self._probing = False
            return
        with self._lock:
            self._up, self._probing = True, False
        log.warning("Redis expert cache at %s is back; using it again (entries written to %s meanwhile stay local)",
                    self.url, self.fallback.location)

    def read(self, key: str) -> bytes | None:
        return self._redis(lambda: self._client.get(self.PREFIX + key), lambda: self.fallback.read(key))

    def write(self, key: str, data: bytes) -> None:
        self._redis(lambda: self._client.set(self.PREFIX + key, data, ex=self.ttl_s or None),
                    lambda: self.fallback.write(key, data))

    def delete(self, key: str) -> None:
        self._redis(lambda: self._client.delete(self.PREFIX + key), lambda: self.fallback.delete(key))

    def clear(self) -> int:
        """Every entry of this cache on the server (other keys are left alone) and the local fallback's."""
        count = 0
        try:
            keys = list(self._client.scan_iter(match=self.PREFIX + "*", count=1000))
            for start in range(0, len(keys), 1000):
                count += self._client.delete(*keys[start:start + 1000])
        except self._errors as exc:
            raise ServiceUnavailable("Redis (expert cache)", self.url, str(exc) or exc.__class__.__name__) from None
        return count + self.fallback.clear()
