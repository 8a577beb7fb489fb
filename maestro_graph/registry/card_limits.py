"""How many calls a card's endpoints take at once: counted in this process, or across a whole Ray cluster; and how
large a result any expert may return (`MAX_RESULT_ITEMS`, `MAX_RESULT_CHARS`, which the handles enforce and the fault
injector exceeds).

A card's `concurrency` protects the expert behind it. In one process a lock and a count per endpoint keep it
(`ProcessSlots`). On a Ray cluster every worker holds its own registry, so counts kept per process would let N
workers send N times the limit to one endpoint: there a card whose calls go to endpoints (an `openai` card) takes
its slots from one named, detached Ray actor per card (`ClusterSlots`), created with `get_if_exists` so the driver
and every worker, of this run and of any other run on the cluster, find the same one; it asks for no CPU, so it
takes no worker's place. In-process experts keep per-process counts: each worker holds its own copy of the model.

Why a Ray actor and not a Redis semaphore: the limit matters where episodes run on Ray, and then Ray is there
already, whereas Redis is optional (`--cache-url`) and belongs to the cache, which carries on with local files
when Redis goes away, so a limit kept there would vanish with it. The actor also waits without polling (a freed
slot wakes the next caller at once) and balances a card's endpoints by the whole cluster's counts, not by what one
worker sees. `maestro serve` replicas behind a load balancer are not Ray workers: each keeps its own counts.

A slot is a lease. A holder that dies (a killed worker) never gives its slot back, so a lease expires after
`lease_s` (twice the card's timeout and a grace: a call the handle stopped waiting for keeps its slot until its
thread ends, since the endpoint is still serving it). When the actor cannot be reached, the process falls back to
its own counts with one warning and tries the cluster again later: an episode never fails for want of the limiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.cancellation import POLL_S, raise_if_cancelled

__all__ = ["Lease", "Slots", "ProcessSlots", "ClusterSlots", "on_ray", "ACTOR_NAMESPACE", "LEASE_GRACE_S",
           "MAX_RESULT_ITEMS", "MAX_RESULT_CHARS"]

ACTOR_NAMESPACE = "maestro"
"""The Ray namespace of the limiters, the same for every job, so two runs on one cluster share a card's limit."""
LEASE_GRACE_S = 30.0
"""Added to twice the card's timeout to make a lease's lifetime."""
MAX_RESULT_ITEMS = 100_000
"""An expert result (list) with more items than this is refused as oversized."""
MAX_RESULT_CHARS = 1_000_000
"""An expert result (text, or a chat reply's text) longer than this is refused as oversized."""
_RPC_TIMEOUT_S = 10.0
"""How long an answer from the limiter may take beyond the wait asked of it before it counts as unreachable."""
_RETRY_CLUSTER_S = 30.0
"""How long a process keeps its own counts after the limiter failed before it asks the cluster again."""

log = logging.getLogger("maestro.limits")


@dataclass(frozen=True)
class Lease:
    """A slot on one endpoint (its position in the card's list), held until the call's thread ends."""

    endpoint: int
    token: str | None = None
    """The cluster lease's id; None for a slot counted in this process."""


class Slots(Protocol):
    """Where a handle takes a slot before a call. `acquire` waits until one of the `allowed` endpoints (positions)
    has room, at most until `deadline` (`time.perf_counter()`), and returns None then; Cancelled once `cancel` is
    set. Every lease it returns is given back with `release`, from any thread."""

    def acquire(self, allowed: Sequence[int], deadline: float, cancel: threading.Event | None) -> Lease | None: ...

    def release(self, lease: Lease) -> None: ...


def _least_busy(loads: Sequence[int], limit: int, turn: int) -> int | None:
    """The position of the least busy load below `limit`, or None when all are full. Ties go to the first at or
    after `turn`, so equally busy endpoints take calls in rotation."""
    free = [i for i, n in enumerate(loads) if n < limit]
    return min(free, key=lambda i: (loads[i], (i - turn) % len(loads))) if free else None


class ProcessSlots:
    """`limit` calls at once per endpoint, counted in this process."""

    def __init__(self, endpoints: int, limit: int):
        self.limit = limit
        self._loads = [0] * endpoints
        self._turn = 0
        self._freed = threading.Condition()

    def acquire(self, allowed: Sequence[int], deadline: float, cancel: threading.Event | None) -> Lease | None:
        with self._freed:
            while True:
                raise_if_cancelled(cancel)
                pick = _least_busy([self._loads[i] for i in allowed], self.limit, self._turn)
                if pick is not None:
                    self._turn += 1
                    self._loads[allowed[pick]] += 1
                    return Lease(allowed[pick])
                left = deadline - time.perf_counter()
                if left <= 0:
                    return None
                self._freed.wait(min(left, POLL_S) if cancel is not None else left)

    def release(self, lease: Lease) -> None:
        with self._freed:
            self._loads[lease.endpoint] -= 1
            self._freed.notify_all()  # all: a waiter may be allowed only other endpoints than the freed one


def on_ray() -> bool:
    """Whether this process is connected to a Ray cluster (a Ray worker, or a driver that started one). Ray is not
    imported for the question: a process that never imported it is not on a cluster."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


class ClusterSlots:
    """`limit` calls at once per endpoint across the cluster, from the card's named Ray actor, while this process is
    on a Ray cluster; `fallback` counts in this process when it is not, or while the actor cannot be reached."""

    def __init__(self, card: str, urls: Sequence[str], limit: int, lease_s: float, fallback: ProcessSlots):
        self.card = card
        self.urls = list(urls)
        self.limit = limit
        self.lease_s = lease_s
        self.fallback = fallback
        self._actor: Any = None
        self._local_until = 0.0  # monotonic time before which the fallback counts (after a failure)
        self._lock = threading.Lock()

    def _limiter(self) -> Any:
        import ray

        with self._lock:
            if self._actor is None:
                remote = ray.remote(num_cpus=0, max_restarts=-1)(_CardSlotsActor)
                self._actor = remote.options(name=f"card-slots:{self.card}", namespace=ACTOR_NAMESPACE,
                                             lifetime="detached", get_if_exists=True).remote()
            return self._actor

    def acquire(self, allowed: Sequence[int], deadline: float, cancel: threading.Event | None) -> Lease | None:
        if not on_ray() or time.monotonic() < self._local_until:
            return self.fallback.acquire(allowed, deadline, cancel)
        import ray
        from ray.exceptions import RayError

        token = uuid.uuid4().hex  # one id for every round of the wait: a grant the caller missed is found again
        urls = [self.urls[i] for i in allowed]
        try:
            limiter = self._limiter()
            while True:
                raise_if_cancelled(cancel)
                left = deadline - time.perf_counter()
                wait = max(0.0, min(left, POLL_S) if cancel is not None else left)
                url = ray.get(limiter.acquire.remote(token, urls, self.limit, self.lease_s, wait),
                              timeout=wait + _RPC_TIMEOUT_S)
                if url is not None:
                    return Lease(self.urls.index(url), token)
                if left <= 0:
                    return None
        except (RayError, ConnectionError) as exc:
            self._actor = None  # found again when the cluster is asked next (it may have been restarted)
            self._local_until = time.monotonic() + _RETRY_CLUSTER_S
            log.warning("model %r: the cluster-wide limit (Ray actor card-slots:%s) cannot be reached (%s: %s); "
                        "counting this process's calls only for %.0f s", self.card, self.card,
                        exc.__class__.__name__, str(exc).splitlines()[0] if str(exc) else "", _RETRY_CLUSTER_S)
            return self.fallback.acquire(allowed, deadline, cancel)

    def release(self, lease: Lease) -> None:
        if lease.token is None:
            self.fallback.release(lease)
            return
        from ray.exceptions import RayError

        with contextlib.suppress(RayError, ConnectionError):  # a lost lease expires on its own
            self._limiter().release.remote(lease.token)  # not awaited: the call's thread is done and goes


class _CardSlotsActor:
    """One card's calls in flight on each endpoint, for the whole cluster (the Ray actor behind ClusterSlots; made
    remote there, so importing this module needs no Ray). Asynchronous: waiting callers hold no thread."""

    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, float]] = {}  # token -> (endpoint URL, monotonic expiry)
        self._turn = 0
        self._changed = asyncio.Condition()

    def _grant(self, token: str, urls: list[str], limit: int, lease_s: float) -> str | None:
        now = time.monotonic()
        self._leases = {t: held for t, held in self._leases.items() if held[1] > now}
        if token in self._leases:  # granted in a round whose answer the caller did not wait for
            return self._leases[token][0]
        loads = [sum(url == held[0] for held in self._leases.values()) for url in urls]
        pick = _least_busy(loads, limit, self._turn)
        if pick is None:
            return None
        self._turn += 1
        self._leases[token] = (urls[pick], now + lease_s)
        return urls[pick]

    async def acquire(self, token: str, urls: list[str], limit: int, lease_s: float, wait_s: float) -> str | None:
        """The URL of the endpoint granted to `token`, or None when none of `urls` had room within `wait_s`."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_s
        async with self._changed:
            while (url := self._grant(token, urls, limit, lease_s)) is None:
                left = end - loop.time()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
            return url

    async def release(self, token: str) -> None:
        async with self._changed:
            if self._leases.pop(token, None) is not None:
                self._changed.notify_all()

    async def in_flight(self) -> dict[str, int]:
        """Leases held now, by endpoint URL (for operators: `ray.get_actor("card-slots:NAME", namespace="maestro")`)."""
        now = time.monotonic()
        held = [url for url, expiry in self._leases.values() if expiry > now]
        return {url: held.count(url) for url in dict.fromkeys(held)}
