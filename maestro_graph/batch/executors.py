"""Where batch work runs: a thread pool in this process (the default) or Ray actors on a cluster, behind one
interface, `map_unordered(job, items)`, that yields `(index, result)` as each item finishes. Episodes, pair
measurements and GRPO rollouts are jobs; the callers write each result as it arrives, so a run's records are the
same whichever executor ran them (docs/scale.md: existing engines, never a home-made scheduler).

A Ray worker is an actor holding its own registry, built from the driver's `RegistrySource` and the driver's
registry files, which travel with the job (`bundle.RegistryBundle`), as an item's image files travel with the item
(CarriesImages): a node needs the package and nothing else. Experts load lazily on first use and each card's
concurrency limit applies within the actor. Workers join as the cluster places them (none is refused for want of
CPUs), and their warnings reach the driver's terminal. A worker that dies (its process, or its node) is lost: its
item goes to another worker, a replacement is asked for, and the loss is named in `lost`, so a run can say it ran on
less than it asked for; the driver receives each item's result once, so nothing is written twice.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, Protocol, cast, runtime_checkable

from ..cache.backends import DEFAULT_TTL_S
from ..cache.store import CacheStats, open_cache
from ..core.configs import DEFAULT_WORKER_WAIT_S
from ..core.environment import HF_HUB_OFFLINE, OMP_NUM_THREADS, RAY_JOB_CONFIG, TOKENIZERS_PARALLELISM, present
from ..core.memo import LRU
from ..digests import file_digest
from ..errors import ConfigError, NoLiveWorker, ServiceUnavailable, import_extra
from ..images.load import MAX_FILE_BYTES, read_regular_file
from ..registry import Registry
from .bundle import RegistryBundle

__all__ = ["Job", "Executor", "CarriesImages", "LostWorker", "RegistrySource", "ThreadExecutor", "RayExecutor",
           "open_executor", "node_folder"]

log = logging.getLogger("maestro.batch")

Job = Callable[[Registry, Any], Any]
"""A unit of batch work: called with the worker's registry and one item, it returns the item's result. On Ray it is
pickled to the workers once per map, so it is a module-level function or an object of a module-level class holding
only data (policy names, configs, weights as tensors), never a registry or a live connection."""

_WORKER_ENV = (OMP_NUM_THREADS.name, HF_HUB_OFFLINE.name, TOKENIZERS_PARALLELISM.name, "PYTHONPATH")
"""Environment a Ray worker takes from the driver: thread limits, offline mode, and where plug-in experts import
from (a `python` card's entry)."""
_PROBE_TIMEOUT_S = 5.0
"""How long a cluster address may take to accept a connection before it counts as unreachable."""
_RETRIES = 3
"""How often an item whose worker died is run again (on another worker) before the run fails: an item that kills
every worker it runs on is not passed around forever."""
_REPLACEMENTS = 3
"""Replacements asked for per worker of `--workers`, over a run: a lost worker's place is taken by a new actor
wherever the cluster has room (its node, if the process died; a new node, on an autoscaling cluster)."""
_PLACEMENT_WAIT_S = 30.0
"""How long a map waits for its first worker before it says why on the driver (and goes on waiting)."""
_SHIPPED_IMAGES = 256
"""Images the driver keeps in the object store for items still to come (by content digest)."""
_LOCAL_IMAGES = 256
"""Image copies a worker keeps on its node's disk during a map (by content digest)."""
_FORGET_TIMEOUT_S = 5.0
"""How long the end of a map waits for the workers to remove their image copies (a worker still running an
interrupted map's item removes them when it is done)."""


@dataclass(frozen=True)
class LostWorker:
    """A worker a run asked for and lost: it died while running items (`stage` "run") or could not start
    (`stage` "start": its registry could not be built, or its process died first)."""

    name: str
    """`node IP:pid`, or `worker N` for one that died before it could say where it ran."""
    stage: Literal["run", "start"]
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({'died' if self.stage == 'run' else 'did not start'}: {self.reason})"


class Executor(Protocol):
    """Runs `job(registry, item)` for every item; yields (index in `items`, result) in completion order."""

    done_by_worker: Counter[str]
    """Items finished per worker (a thread's name, a Ray worker's `node IP:pid`), over every map so far."""
    lost: list[LostWorker]
    """Workers that died or never started, over every map so far (threads are never lost)."""

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]: ...


@dataclass(frozen=True)
class RegistrySource:
    """How to build the registry: what a remote worker needs to hold one like the driver's. The config path is made
    absolute here (the driver reads it to ship it); the cache folder is kept as given, since it is each node's own
    (`on_node`)."""

    config: Path | None = None
    cache_dir: Path | None = None
    """No cache when None (`--no-cache`). Relative (the default `.maestro-cache`): under the driver's working
    directory on the driver, under `node_folder()` on a Ray worker; absolute: that folder on every node."""
    cache_url: str | None = None
    """A shared Redis cache, with `cache_dir` as its local fallback."""
    profiled: bool = True
    """Read the config's profile file (`Registry.load`)."""
    cache_ttl_s: int = DEFAULT_TTL_S
    """Seconds a Redis cache entry lives after it is written (0: until Redis evicts it)."""

    def __post_init__(self) -> None:
        if self.config is not None:
            object.__setattr__(self, "config", Path(self.config).resolve())
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if self.cache_url is not None and self.cache_dir is None:
            raise ConfigError("a cache URL needs a cache directory for its local fallback", field="cache_url")

    def load(self) -> Registry:
        cache = (open_cache(self.cache_dir, self.cache_url, ttl_s=self.cache_ttl_s)
                 if self.cache_dir is not None else None)
        return Registry.load(self.config, cache=cache, profiled=self.profiled)

    def bundle(self) -> RegistryBundle | None:
        """The driver's registry files for the workers; None for the packaged registry, which every node has."""
        return RegistryBundle.of(self.config, profiled=self.profiled) if self.config is not None else None

    def on_node(self, bundle: RegistryBundle | None) -> RegistrySource:
        """This source as a worker on its own node builds it: the shipped registry unpacked under `node_folder()`,
        and a relative cache folder there too, so no node needs the driver's disk layout."""
        root = node_folder()
        config = bundle.unpack(root / "registries") if bundle is not None else None
        cache_dir = self.cache_dir
        if cache_dir is not None and not cache_dir.is_absolute():
            cache_dir = root / cache_dir
        return replace(self, config=config, cache_dir=cache_dir)


def node_folder() -> Path:
    """This node's own folder for what workers keep on it (unpacked registries, a relative cache folder): under the
    node's temporary directory (TMPDIR), per user, so nothing depends on the driver's paths. The skill code unpacked
    there is run, so the folder must be this user's and writable by no one else (a folder another user made first
    at that predictable path is refused, naming it)."""
    folder = Path(tempfile.gettempdir()) / f"maestro-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(f"{folder} is not a folder of this user's that only it can write (owner uid "
                          f"{info.st_uid}, mode {stat.filemode(info.st_mode)}); remove it, or point TMPDIR elsewhere",
                          field="TMPDIR")
    return folder


class ThreadExecutor:
    """`workers` threads in this process sharing one registry (so one set of loaded experts and one cache)."""

    def __init__(self, registry: Registry, workers: int = 1):
        self.registry = registry
        self.workers = workers
        self.done_by_worker: Counter[str] = Counter()
        self.lost: list[LostWorker] = []

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        def run(item: Any) -> tuple[str, Any]:
            return threading.current_thread().name, job(self.registry, item)

        if self.workers <= 1:
            for i, item in enumerate(items):
                worker, result = run(item)
                self.done_by_worker[worker] += 1
                yield i, result
            return
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="maestro-batch")
        try:
            futures = {pool.submit(run, item): i for i, item in enumerate(items)}
            for future in as_completed(futures):
                worker, result = future.result()
                self.done_by_worker[worker] += 1
                yield futures[future], result
        finally:  # a consumer that stops early (an interrupt) does not wait for the items not yet started
            pool.shutdown(wait=True, cancel_futures=True)


@runtime_checkable
class CarriesImages(Protocol):
    """An item whose job reads image files (a Task, a GRPO group): on Ray the files travel with it, so a worker on
    a node that cannot see the driver's disk reads the same bytes. Items without these methods travel as they are."""

    def image_files(self) -> list[str]:
        """The image files the job will read."""
        ...

    def with_image_files(self, paths: dict[str, str]) -> Any:
        """The same item reading each file from `paths[file]` instead."""
        ...


class RayExecutor:
    """Up to `workers` Ray actors, each holding a registry built from `source`, on the cluster at `address` (None:
    a local cluster started here with a logical CPU per worker). An unreachable address is a ServiceUnavailable.

    Elastic: every actor is requested at once, and each takes items from the moment the cluster has placed it and
    built its registry, so a cluster smaller than `workers` starts with what it has and grows as nodes join (an
    autoscaler, KubeRay's included, sees the pending actors as demand). Work travels with its data: the registry's
    files go to the object store once per job and each image file once per content digest, and the worker reads
    local copies, so a node needs the package and nothing else. Workers' output (warnings: Redis lost, an expert
    failing) is streamed to the driver's terminal, prefixed with the worker. Cache statistics of the workers are
    added to `stats` (the driver's registry cache) after each map, so reports count the cluster's hits, misses and
    errors; `done_by_worker` counts the items each worker ran, `lost` names the workers that died or never
    started. A map with no worker ready for `worker_wait_s` (none ready yet, or every one lost) gives up with
    NoLiveWorker; the results it yielded stand."""

    def __init__(self, source: RegistrySource, *, workers: int, address: str | None = None,
                 stats: CacheStats | None = None, worker_wait_s: float = DEFAULT_WORKER_WAIT_S):
        if address not in (None, "auto"):
            _probe(address)  # before importing Ray, which reads its settings (authentication) on import
        bundle = source.bundle()  # before starting anything: a registry too large to ship is a usage error
        self.ray = import_extra("ray", "ray", "--executor ray")
        self.stats = stats
        self.workers = workers
        self.worker_wait_s = worker_wait_s
        if not self.ray.is_initialized():
            try:
                self.ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                              runtime_env={"env_vars": _worker_env()}, log_to_driver=True, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ServiceUnavailable("Ray cluster", address or "local", str(exc).splitlines()[0]) from None
        # no restarts by Ray: a restarted actor waits for room on the cluster, and its item with it, even when
        # other workers are free; the driver moves the item and asks for a replacement instead
        self._actor = self.ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_RayWorker)
        self._args = (source, self.ray.put(bundle))  # the object store holds the registry once for every worker
        self._starting: dict[Any, tuple[Any, int]] = {}
        """Actors not yet placed or still building their registries, with their number, by their `ready` call."""
        self._asked = 0
        for _ in range(workers):
            self._start_one()
        self._idle: list[Any] = []
        self._names: dict[Any, str] = {}
        self.done_by_worker: Counter[str] = Counter()
        """Items finished per worker (`node IP:pid`), over every map of this executor."""
        self.lost: list[LostWorker] = []
        self._shipped: LRU[str, Any] = LRU(_SHIPPED_IMAGES)
        """Object references of the images sent lately, by content digest: an image several items share (a GRPO
        group, a pair measurement) goes to the object store once."""

    @property
    def started(self) -> int:
        """Workers placed and ready, lost ones included."""
        return len(self._names)

    def _start_one(self) -> None:
        self._asked += 1
        actor = self._actor.remote(*self._args)
        self._starting[actor.ready.remote()] = (actor, self._asked)

    def _replace(self) -> None:
        """A new actor in a lost one's place, while the run has replacements left."""
        if self._asked < self.workers * (1 + _REPLACEMENTS):
            self._start_one()

    def map_unordered(self, job: Job, items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        job_ref = [self.ray.put(job)]  # in a list: Ray passes the reference, and the worker fetches it once
        queue = deque(enumerate(items))
        running: dict[Any, tuple[Any, int, Any]] = {}
        """(actor, index, item) by the reference of its `run` call."""
        attempts: Counter[int] = Counter()
        finished = 0  # items yielded
        alone_since: float | None = None  # since when no worker is alive (None: one is)
        try:
            while queue or running:
                while queue and self._idle:
                    actor = self._idle.pop()
                    index, item = queue.popleft()
                    running[actor.run.remote(job_ref, index, *self._ship(item))] = (actor, index, item)
                if not running and not self._starting:
                    raise ConfigError(f"no Ray worker is left to run the {len(queue)} items still to do; lost: "
                                      f"{'; '.join(map(str, self.lost[-3:])) or 'none'} (every node needs the "
                                      "package, and its extras for the registry's experts)", field="executor")
                alone_since = None if running else alone_since or time.monotonic()  # idle ones would be running
                done, _ = self.ray.wait([*running, *self._starting], num_returns=1, timeout=None if running else
                                        max(0.1, min(_PLACEMENT_WAIT_S, cast(float, alone_since) + self.worker_wait_s
                                                     - time.monotonic())))
                if not done:  # the wait timed out: nothing runs
                    self._report_waiting(time.monotonic() - cast(float, alone_since), finished, len(items))
                elif done[0] in self._starting:
                    self._join(done[0])
                else:
                    actor, index, item = running.pop(done[0])
                    try:
                        result = self.ray.get(done[0])
                    except self.ray.exceptions.RayActorError as exc:
                        self._lose(self._names[actor], "run", exc)
                        self._replace()
                        attempts[index] += 1
                        if attempts[index] > _RETRIES:
                            raise ConfigError(f"item {index} was running on {attempts[index]} workers that died (last: "
                                              f"{self.lost[-1]}); it was not run again", field="executor") from exc
                        queue.appendleft((index, item))
                        continue
                    self._idle.append(actor)
                    self.done_by_worker[self._names[actor]] += 1
                    finished += 1
                    yield result
            if self.stats is not None:
                self._add_stats()
        finally:  # an actor runs its calls in order, so one still busy (an interrupted map) can take the next map's
            self._idle.extend(actor for actor, _, _ in running.values())
            forgotten = [actor.forget_images.remote() for actor in self._idle]  # after the calls already queued
            self.ray.wait(forgotten, num_returns=len(forgotten), timeout=_FORGET_TIMEOUT_S)

    def _add_stats(self) -> None:
        """The workers' cache counts added to `stats`; a worker that died since its last item is lost here."""
        calls = {actor.take_stats.remote(): actor for actor in self._idle}
        for ref, actor in calls.items():
            try:
                counts = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as exc:
                self._idle.remove(actor)
                self._lose(self._names[actor], "run", exc)
                self._replace()
                continue
            for name, value in counts.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    def _lose(self, name: str, stage: Literal["run", "start"], exc: BaseException | str) -> None:
        reason = exc if isinstance(exc, str) else (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        self.lost.append(LostWorker(name, stage, reason[:300]))
        log.warning("Ray worker %s", self.lost[-1])

    def _ship(self, item: Any) -> tuple[Any, dict[str, tuple[str, Any]]]:
        """The item and its image files as (content digest, object reference) by path; files the driver cannot
        read stay paths, so the worker reports them as a thread would."""
        if not isinstance(item, CarriesImages):
            return item, {}
        files: dict[str, tuple[str, Any]] = {}
        for path in item.image_files():
            digest = file_digest(path)
            ref = self._shipped.get(digest)
            if ref is None:
                data = read_regular_file(path, MAX_FILE_BYTES + 1)
                if data is None:
                    continue
                ref = self.ray.put(data)
                self._shipped.put(digest, ref)
            files[path] = (digest, ref)
        return item, files

    def _join(self, ready_ref: Any) -> None:
        """A started actor takes items from now on; one that could not build its registry, or died first, is lost
        (and replaced)."""
        actor, number = self._starting.pop(ready_ref)
        try:
            name, failure = self.ray.get(ready_ref)
        except self.ray.exceptions.RayError as exc:
            self._lose(f"worker {number}", "start", exc)
            self._replace()
            return
        self._names[actor] = name
        if failure is not None:  # the same everywhere (a missing extra) or on this node only: either way, named
            self._lose(name, "start", failure)
            self.ray.kill(actor)
            return
        self._idle.append(actor)
        log.info("Ray worker %s started (%d of %d)", name, self.started, self.workers)

    def _report_waiting(self, waited_s: float, finished: int, total: int) -> None:
        """Say on the driver why the map waits; past `worker_wait_s`, give up (NoLiveWorker, naming what ran)."""
        ran = f"{finished} of {total} items ran"
        if waited_s >= self.worker_wait_s:
            raise NoLiveWorker(f"no Ray worker was alive for {waited_s:.0f} s (--worker-wait-s "
                               f"{self.worker_wait_s:g}), so the run gave up: {ran}; lost: "
                               f"{'; '.join(map(str, self.lost[-3:])) or 'none'}", finished=finished)
        free = self.ray.available_resources().get("CPU", 0)
        log.warning("no Ray worker is running %s after %.0f s (%s; giving up at %g s): the cluster has %g free CPUs "
                    "and each worker takes one; waiting for nodes to join (an autoscaling cluster adds them for the "
                    "%d pending workers)", "any more" if finished else "yet", waited_s, ran, self.worker_wait_s,
                    free, len(self._starting))

    def close(self) -> None:
        """Stop every worker, started or not."""
        for actor in [*self._idle, *(actor for actor, _ in self._starting.values())]:
            self.ray.kill(actor)
        self._idle, self._starting = [], {}


def _worker_env() -> dict[str, str]:
    """The driver's `_WORKER_ENV` for the workers, less what the Ray job (`ray job submit --runtime-env`) already
    sets: Ray refuses a driver's runtime environment that names a variable the job's does."""
    job = json.loads(RAY_JOB_CONFIG.read() or "{}")
    job_env = (job.get("runtime_env") or {}).get("env_vars") or {}
    return {k: v for k, v in present(_WORKER_ENV).items() if k not in job_env}


def _probe(address: str) -> None:
    """Refuse an address nothing listens on at once: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ServiceUnavailable("Ray cluster", address, str(exc) or exc.__class__.__name__) from None


class _LocalImages:
    """A worker's copies of the images of one map, one file per content digest under a folder of its own, keeping
    the file's name: the `_LOCAL_IMAGES` most recently used, so a long map holds a bounded number, and none once the
    map is over (`remove`)."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self._files: OrderedDict[str, Path] = OrderedDict()

    def paths(self, shipped: dict[str, tuple[str, Any]]) -> dict[str, str]:
        """The local file of each shipped path, fetched from the object store when not held yet."""
        import ray

        local: dict[str, str] = {}
        self.root = self.root or Path(tempfile.mkdtemp(prefix="maestro-images-"))
        for original, (digest, ref) in shipped.items():
            path = self._files.get(digest)
            if path is None:
                path = self.root / digest / Path(original).name
                path.parent.mkdir(exist_ok=True)
                partial = path.with_name(f".{path.name}.part")
                partial.write_bytes(ray.get(ref))
                os.replace(partial, path)
                self._files[digest] = path
            self._files.move_to_end(digest)
            local[original] = str(path)
        while len(self._files) > max(_LOCAL_IMAGES, len(shipped)):  # never the item's own images
            shutil.rmtree(self._files.popitem(last=False)[1].parent, ignore_errors=True)
        return local

    def remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        self._files.clear()


class _RayWorker:
    """The actor behind RayExecutor (made remote there, so importing this module needs no Ray)."""

    def __init__(self, source: RegistrySource, bundle: RegistryBundle | None):
        self.failure: str | None = None
        try:
            self.registry = source.on_node(bundle).load()
        except Exception as exc:  # the actor's boundary: the driver names this worker and why, and goes on without it
            self.failure = f"{exc.__class__.__name__}: {exc}"
        self._job: tuple[str, Job] | None = None
        self._reported = {f.name: 0 for f in fields(CacheStats) if not f.name.startswith("_")}
        self._images = _LocalImages()

    def ready(self) -> tuple[str, str | None]:
        """The worker's name on the driver (`node IP:pid`) once its registry is built, and why it could not build
        one (None: it did)."""
        import ray

        return f"{ray.util.get_node_ip_address()}:{os.getpid()}", self.failure

    def run(self, job_ref: list, index: int, item: Any, files: dict[str, tuple[str, Any]]) -> tuple[int, Any]:
        import ray

        key = job_ref[0].hex()
        if self._job is None or self._job[0] != key:  # a new map (or a restarted worker): fetch its job once
            self._job = (key, ray.get(job_ref[0]))
        if files:
            item = item.with_image_files(self._images.paths(files))
        return index, self._job[1](self.registry, item)

    def take_stats(self) -> dict[str, int]:
        """Cache counts since the last call (a restarted worker's earlier counts are lost with it)."""
        stats = self.registry.cache.stats if self.registry.cache is not None else None
        now = {name: getattr(stats, name) if stats else 0 for name in self._reported}
        delta = {name: now[name] - self._reported[name] for name in now}
        self._reported = now
        return delta

    def forget_images(self) -> None:
        self._images.remove()


def open_executor(spec: str, *, registry: Registry, source: RegistrySource, workers: int,
                  worker_wait_s: float = DEFAULT_WORKER_WAIT_S) -> Executor:
    """The executor of a `--executor` value: `thread` (the default: `workers` threads here), `ray` (a local Ray
    cluster) or `ray:ADDRESS` (an existing one, e.g. `ray:10.0.0.5:6379` or `ray:auto`), which gives up after
    `worker_wait_s` with no live worker."""
    kind, _, address = spec.partition(":")
    if kind == "thread" and not address:
        return ThreadExecutor(registry, workers)
    if kind == "ray":
        return RayExecutor(source, workers=workers, address=address or None, worker_wait_s=worker_wait_s,
                           stats=registry.cache.stats if registry.cache is not None else None)
    raise ConfigError(f"unknown executor {spec!r}; use thread, ray or ray:ADDRESS", field="executor")
