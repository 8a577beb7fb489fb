"""Where batch work runs: a thread pool in this process (the default) or Ray actors on a cluster, behind one
interface, `map_unordered(job, items)`, that yields `(index, result)` as each item finishes. Episodes, pair
measurements and GRPO rollouts are jobs; the callers write each result as it arrives, so a run's records are the
same whichever executor ran them (docs/scale.md: existing engines, never a home-made scheduler).

A Ray worker is an actor holding its own registry, built from the same `RegistrySource` as the driver's (the same
config file, cache directory and Redis URL), with experts loaded lazily on first use and each card's concurrency
limit applying within the actor. A worker that dies is restarted by Ray and its item run again; the driver receives
each item's result once, so nothing is written twice.
"""

from __future__ import annotations

import os
import socket
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..cache.store import CacheStats, open_cache
from ..errors import ConfigError, ServiceUnavailable, import_extra
from ..registry import Registry

__all__ = ["Job", "Executor", "RegistrySource", "ThreadExecutor", "RayExecutor", "open_executor"]

Job = Callable[[Registry, Any], Any]
"""A unit of batch work: called with the worker's registry and one item, it returns the item's result. On Ray it is
pickled to the workers once per map, so it is a module-level function or an object of a module-level class holding
only data (policy names, configs, weights as tensors), never a registry or a live connection."""

_WORKER_ENV = ("OMP_NUM_THREADS", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "PYTHONPATH")
"""Environment a Ray worker takes from the driver: thread limits, offline mode, and where plug-in experts import
from (a `python` card's entry)."""
_PROBE_TIMEOUT_S = 5.0
"""How long a cluster address may take to accept a connection before it counts as unreachable."""
_RESTARTS = 3
"""How often Ray restarts a dead worker and re-runs its item before the run fails."""


class Executor(Protocol):
    """Runs `job(registry, item)` for every item; yields (index in `items`, result) in completion order."""

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]: ...


@dataclass(frozen=True)
class RegistrySource:
    """How to build the registry: what a remote worker needs to hold one like the driver's. Paths are made absolute
    here, since a worker need not share the driver's working directory."""

    config: Path | None = None
    cache_dir: Path | None = None
    """No cache when None (`--no-cache`)."""
    cache_url: str | None = None
    """A shared Redis cache, with `cache_dir` as its local fallback."""
    profiled: bool = True
    """Read the config's profile file (`Registry.load`)."""

    def __post_init__(self) -> None:
        for name in ("config", "cache_dir"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).resolve())
        if self.cache_url is not None and self.cache_dir is None:
            raise ConfigError("a cache URL needs a cache directory for its local fallback", field="cache_url")

    def load(self) -> Registry:
        cache = open_cache(self.cache_dir, self.cache_url) if self.cache_dir is not None else None
        return Registry.load(self.config, cache=cache, profiled=self.profiled)


class ThreadExecutor:
    """`workers` threads in this process sharing one registry (so one set of loaded experts and one cache)."""

    def __init__(self, registry: Registry, workers: int = 1):
        self.registry = registry
        self.workers = workers

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        if self.workers <= 1:
            yield from ((i, job(self.registry, item)) for i, item in enumerate(items))
            return
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="maestro-batch")
        try:
            futures = {pool.submit(job, self.registry, item): i for i, item in enumerate(items)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # a consumer that stops early (an interrupt) does not wait for the items not yet started
            pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """`workers` Ray actors, each holding a registry built from `source`, on the cluster at `address` (None: a
    local cluster started here with a logical CPU per worker). An unreachable address is a ServiceUnavailable.
    Cache statistics of the workers are added to `stats` (the driver's registry cache) after each map, so reports
    count the cluster's hits and misses."""

    def __init__(self, source: RegistrySource, *, workers: int, address: str | None = None,
                 stats: CacheStats | None = None):
        if address not in (None, "auto"):
            _probe(address)  # before importing Ray, which reads its settings (authentication) on import
        self.ray = import_extra("ray", "ray", "--executor ray")
        self.stats = stats
        if not self.ray.is_initialized():
            env = {k: os.environ[k] for k in _WORKER_ENV if k in os.environ}
            try:
                self.ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                              runtime_env={"env_vars": env}, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ServiceUnavailable("Ray cluster", address or "local", str(exc).splitlines()[0]) from None
        cpus = self.ray.cluster_resources().get("CPU", 0)
        if cpus < workers:  # an actor that cannot be placed would hold its items forever
            raise ConfigError(f"the Ray cluster has {cpus:g} CPUs and each of the {workers} workers takes one; lower "
                              "--workers or give the nodes more logical CPUs (`ray start --num-cpus N`: experts "
                              "that wait on a server need few real cores)", field="workers")
        worker = self.ray.remote(num_cpus=1, max_restarts=_RESTARTS, max_task_retries=_RESTARTS)(_RayWorker)
        self._actors = [worker.remote(source) for _ in range(workers)]

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        from ray.util import ActorPool

        job_ref = [self.ray.put(job)]  # in a list: Ray passes the reference, and the worker fetches it once
        yield from ActorPool(self._actors).map_unordered(lambda actor, pair: actor.run.remote(job_ref, *pair),
                                                         list(enumerate(items)))
        if self.stats is not None:
            for counts in self.ray.get([actor.take_stats.remote() for actor in self._actors]):
                for name, value in counts.items():
                    setattr(self.stats, name, getattr(self.stats, name) + value)

    def close(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors = []


def _probe(address: str) -> None:
    """Refuse an address nothing listens on at once: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ServiceUnavailable("Ray cluster", address, str(exc) or exc.__class__.__name__) from None


class _RayWorker:
    """The actor behind RayExecutor (made remote there, so importing this module needs no Ray)."""

    def __init__(self, source: RegistrySource):
        self.registry = source.load()
        self._job: tuple[str, Job] | None = None
        self._reported = {f.name: 0 for f in fields(CacheStats) if not f.name.startswith("_")}

    def run(self, job_ref: list, index: int, item: Any) -> tuple[int, Any]:
        import ray

        key = job_ref[0].hex()
        if self._job is None or self._job[0] != key:  # a new map (or a restarted worker): fetch its job once
            self._job = (key, ray.get(job_ref[0]))
        return index, self._job[1](self.registry, item)

    def take_stats(self) -> dict[str, int]:
        """Cache counts since the last call (a restarted worker's earlier counts are lost with it)."""
        stats = self.registry.cache.stats if self.registry.cache is not None else None
        now = {name: getattr(stats, name) if stats else 0 for name in self._reported}
        delta = {name: now[name] - self._reported[name] for name in now}
        self._reported = now
        return delta


def open_executor(spec: str, *, registry: Registry, source: RegistrySource, workers: int) -> Executor:
    """The executor of a `--executor` value: `thread` (the default: `workers` threads here), `ray` (a local Ray
    cluster) or `ray:ADDRESS` (an existing one, e.g. `ray:10.0.0.5:6379` or `ray:auto`)."""
    kind, _, address = spec.partition(":")
    if kind == "thread" and not address:
        return ThreadExecutor(registry, workers)
    if kind == "ray":
        return RayExecutor(source, workers=workers, address=address or None,
                           stats=registry.cache.stats if registry.cache is not None else None)
    raise ConfigError(f"unknown executor {spec!r}; use thread, ray or ray:ADDRESS", field="executor")
