"""Expert handles: lazy construction, per-card timeout and concurrency, retries, circuit breakers, endpoint
balancing, result checks, and cost accounting of every call.

Skills never hold an expert object directly; they call methods on a `BoundExpert`, which records each call (cost,
latency, error) in the step's ledger. A call that exceeds the card's timeout raises `ExpertTimeout`; the worker
thread cannot be killed and finishes in the background, but the episode goes on without it. Transient failures
(timeouts, dropped connections) are retried with exponential backoff and jitter as the card's `retries` says; every
attempt is charged. After `breaker.failures` failed calls in a row the breaker opens: calls are refused (uncharged)
and `live_unavailable_reason()` reports the expert unavailable, so the action space drops its pairs until a trial
call after `breaker.open_s` succeeds. A result of the wrong type (against the method's return annotation) or above
the size caps is the expert's error, not the skill's.

A call that timed out or whose episode was cancelled is abandoned: if it has not started it never runs, and if it
runs it is asked to stop (its thread's `core.cancellation.current_cancel()` is set; experts with long loops, such as
the OpenCV analyser, look at it), so work whose result nobody waits for does not keep the expert's slots busy.

A card may name several endpoints (`backend.base_urls`: replicas of one model server). Each has its own breaker and
its own `concurrency` slots; a call goes to the least busy endpoint whose breaker is closed, so a down replica is
skipped while its breaker is open and the card stays available while any replica is. When every endpoint is full
the call waits for a slot, within the card's timeout, instead of piling onto a busy server; for an endpoint card on
a Ray cluster the slots are counted cluster-wide (maestro_graph.registry.card_limits). A call that found no slot in
time reached no endpoint and moves no breaker.
"""

from __future__ import annotations

import importlib
import inspect
import random
import threading
import time
import types
import typing
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..cache.store import ExpertCache
from ..core.cancellation import cancellable, wait_result
from ..core.environment import named
from ..core.shared_budget import outlive
from ..digests import Uncacheable, cache_key
from ..errors import Cancelled, ConfigError, ExpertError, ExpertFailure, ExpertTimeout, ExpertUnavailable
from ..experts.protocols import ChatReply
from .card_limits import LEASE_GRACE_S, MAX_RESULT_CHARS, MAX_RESULT_ITEMS, ClusterSlots, ProcessSlots, Slots
from .config import CircuitBreaker, ModelCard, OpenAIBackend, PythonBackend, TransformersBackend
from .faults import FaultyExpert, InjectedFault

__all__ = ["ExpertHandle", "BoundExpert", "Breaker", "Breakers", "CallRecord", "Ledger"]

def _import_entry(entry: str) -> type:
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExpertUnavailable(f"cannot import {module_name!r}: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"{module_name!r} has no attribute {attr!r}", field="backend.entry")
    return cls


def _transient(exc: BaseException | None) -> bool:
    """A failure worth retrying: a timeout or a lost connection anywhere in the cause chain, or an exception that
    says so (`transient = True`). An expert's deterministic crash is not: it would fail the same way again."""
    while exc is not None:
        if isinstance(exc, (ExpertTimeout, ConnectionError, TimeoutError)) or getattr(exc, "transient", False):
            return True
        exc = exc.__cause__
    return False


@lru_cache(maxsize=512)
def _declared_return(func: Any) -> tuple[type, ...] | None:
    """The outer type(s) a method's return annotation promises, or None when it promises nothing checkable."""
    try:
        hint = typing.get_type_hints(func).get("return")
    except Exception:  # unresolvable annotations: nothing to check against
        return None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    outer = tuple(type(None) if o is None else (typing.get_origin(o) or o) for o in options)
    return outer if hint is not None and all(isinstance(t, type) for t in outer) else None


class Breaker:
    """A consecutive-failure circuit breaker. Open: calls are refused until `open_s` has passed; the next call is
    the trial (success closes it, failure opens it again at once)."""

    def __init__(self, config: CircuitBreaker):
        self.config = config
        self.failures = 0
        self.trips = 0
        self._open_until = 0.0
        self._lock = threading.Lock()

    def reason(self) -> str | None:
        with self._lock:
            left = self._open_until - time.monotonic()
            if left <= 0:
                return None
            return f"circuit breaker open for {left:.1f}s more after {self.failures} failed calls in a row"

    def record(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.failures = 0
                return
            self.failures += 1
            if self.failures >= self.config.failures:
                self._open_until = time.monotonic() + self.config.open_s
                self.trips += 1


class Breakers:
    """A card's breakers, one per endpoint (`labels`: the endpoints' URLs; one unlabelled breaker for an expert in
    this process). The card is refused only while every one is open."""

    def __init__(self, config: CircuitBreaker, labels: list[str | None]):
        self.labels = labels
        self.each = [Breaker(config) for _ in labels]

    def closed(self) -> list[int]:
        """The positions of the endpoints a call may go to now (closed, or open long enough for a trial)."""
        return [i for i, breaker in enumerate(self.each) if breaker.reason() is None]

    def reason(self) -> str | None:
        """Why the card is refused (every breaker open), or None."""
        reasons = [breaker.reason() for breaker in self.each]
        if any(r is None for r in reasons):
            return None
        if len(reasons) == 1:
            return reasons[0]
        return "every endpoint's circuit breaker is open: " + "; ".join(
            f"{label}: {r}" for label, r in zip(self.labels, reasons))

    @property
    def trips(self) -> int:
        return sum(breaker.trips for breaker in self.each)


@dataclass
class CallRecord:
    """One expert call as the step's ledger records it; the token counts are a chat reply's (0 for other experts),
    which the served `usage` adds up."""

    model: str
    method: str
    cost: float
    latency_s: float
    error: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure: ExpertFailure | None = None
    """What went wrong when `error` is set (None for a refusal that was the episode's: a cancelled call)."""

    @classmethod
    def of(cls, model: str, method: str, result: Any, cost: float, latency_s: float, *, error: str | None = None,
           failure: ExpertFailure | None = None, cached: bool = False) -> CallRecord:
        """The record of a call that returned `result` (None when it failed with `error`)."""
        reply = result if isinstance(result, ChatReply) else ChatReply("")
        return cls(model, method, cost, latency_s, error, cached, reply.prompt_tokens, reply.completion_tokens,
                   failure)


@dataclass
class Ledger:
    """The expert calls made while one step ran, and the event that cancels the step's episode (None: never)."""

    calls: list[CallRecord] = field(default_factory=list)
    cancel: threading.Event | None = None

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls)


class ExpertHandle:
    """One model card's expert, created on first use and shared by every episode in the process."""

    def __init__(self, card: ModelCard, cache: ExpertCache | None = None):
        self.card = card
        self.cache = cache if card.cacheable else None
        backend = card.backend
        self.urls: list[str | None] = list(backend.endpoints) if isinstance(backend, OpenAIBackend) else [None]
        """Where calls go: the endpoints' base URLs, or one None for an expert in this process."""
        self._experts: list[Any] | None = None  # one per endpoint, built on first use
        self._lock = threading.Lock()
        local = ProcessSlots(len(self.urls), card.concurrency)
        self._slots: Slots = local if not isinstance(backend, OpenAIBackend) else ClusterSlots(
            card.name, backend.endpoints, card.concurrency, 2 * card.timeout_s + LEASE_GRACE_S, local)
        # the card's own threads: an expert stuck on every call holds only these, never a thread another expert needs
        self._pool = ThreadPoolExecutor(card.concurrency * len(self.urls),
                                        thread_name_prefix=f"maestro-expert-{card.name}")
        self._unavailable: str | None | bool = False  # False = not checked yet
        self._check_lock = threading.Lock()
        self.breaker = Breakers(card.breaker, self.urls)

    @property
    def name(self) -> str:
        return self.card.name

    def unavailable_reason(self) -> str | None:
        """Why this expert cannot run here, or None. Cheap: it does not load the model. Checked once."""
        with self._check_lock:
            if self._unavailable is False:
                self._unavailable = self._check()
            return self._unavailable  # type: ignore[return-value]

    def live_unavailable_reason(self) -> str | None:
        """`unavailable_reason()` or an open circuit breaker: what the action space uses now (not memoised)."""
        return self.unavailable_reason() or self.breaker.reason()

    def faults_injected(self) -> Counter[str]:
        """Faults injected into this expert's calls so far, by kind ("none" for clean calls), all endpoints
        together; empty without fault injection or before the expert was built."""
        return sum((Counter(e.injected) for e in self._experts or () if isinstance(e, FaultyExpert)), Counter())

    def _check(self) -> str | None:
        backend = self.card.backend
        if isinstance(backend, PythonBackend):
            try:
                cls = _import_entry(backend.entry)
            except ExpertUnavailable as exc:
                return str(exc)
            check = getattr(cls, "unavailable_reason", None)
            return check(**backend.options) if callable(check) else None
        if isinstance(backend, OpenAIBackend):
            if backend.api_key_env and not named(backend.api_key_env):
                return f"environment variable {backend.api_key_env} (the API key) is not set"
            return None
        if isinstance(backend, TransformersBackend):
            from ..experts.transformers_chat import TransformersChatExpert

            return TransformersChatExpert.unavailable_reason(**backend.model_dump(exclude={"type"}))
        return None  # pragma: no cover - the discriminated union has no other member

    def expert(self) -> Any:
        """The expert object (the first endpoint's, for a card with several), built on first use."""
        return self._built()[0]

    def _built(self) -> list[Any]:
        """The expert object of each endpoint."""
        with self._lock:
            if self._experts is None:
                reason = self.unavailable_reason()
                if reason:
                    raise ExpertUnavailable(f"model {self.name!r} is unavailable: {reason}")
                self._experts = [self._build(url) for url in self.urls]
            return self._experts

    def _build(self, url: str | None) -> Any:
        expert = self._build_backend(url)
        if self.card.faults is None:
            return expert
        return FaultyExpert(expert, self.card.faults, self.name)

    def _build_backend(self, url: str | None) -> Any:
        backend = self.card.backend
        if isinstance(backend, PythonBackend):
            return _import_entry(backend.entry)(**backend.options)
        if isinstance(backend, OpenAIBackend):
            from ..experts.openai_chat import OpenAIChatExpert

            options = backend.model_dump(exclude={"type", "base_url", "base_urls"})
            assert url is not None  # an endpoint's: an OpenAI backend's `urls` are its endpoints
            return OpenAIChatExpert(base_url=url, **options, timeout_s=self.card.timeout_s)
        from ..experts.transformers_chat import TransformersChatExpert

        return TransformersChatExpert(**backend.model_dump(exclude={"type"}))

    def _cost(self, result: Any) -> float:
        cost = self.card.cost.per_call
        if isinstance(result, ChatReply):
            cost += self.card.cost.per_1k_tokens * result.tokens / 1000
        return cost

    def _check_result(self, method: str, func: Any, result: Any) -> None:
        """An oversized result or one of another type than the method declares is the expert's error."""
        where = f"model {self.name!r}.{method}"
        if isinstance(result, (list, tuple, dict)) and len(result) > MAX_RESULT_ITEMS:
            raise ExpertError(f"{where} returned an oversized result: {len(result):,} items, cap {MAX_RESULT_ITEMS:,}",
                              failure=ExpertFailure.OVERSIZED)
        text = result.text if isinstance(result, ChatReply) else result
        if isinstance(text, str) and len(text) > MAX_RESULT_CHARS:
            raise ExpertError(f"{where} returned an oversized result: {len(text):,} characters, "
                              f"cap {MAX_RESULT_CHARS:,}", failure=ExpertFailure.OVERSIZED)
        declared = _declared_return(getattr(inspect.unwrap(func), "__func__", inspect.unwrap(func)))
        if declared is not None and not isinstance(result, declared):
            names = " | ".join(t.__name__ for t in declared)
            raise ExpertError(f"{where} returned {type(result).__name__}, not the {names} its method declares",
                              failure=ExpertFailure.WRONG_TYPE)

    def _backoff_s(self, retry: int) -> float:
        """Exponential backoff with jitter before retry number `retry` (1 = the first retry)."""
        policy = self.card.retries
        return min(policy.max_backoff_s, policy.backoff_s * 2 ** (retry - 1)) * (1 - policy.jitter * random.random())

    def call(self, method: str, args: tuple, kwargs: dict, ledger: Ledger) -> Any:
        """Run one expert method under the card's limits, retrying transient failures; record every attempt."""
        key = None
        if self.cache is not None:
            try:
                key = cache_key("call", self.name, self.card.version, method, list(args), kwargs)
            except Uncacheable:
                key = None
        if key is not None:
            assert self.cache is not None  # a call has a key only with a cache
            hit, value = self.cache.get(key)
            if hit:  # a cached call is charged as the call it replays, with no latency
                ledger.calls.append(CallRecord.of(self.name, method, value, self._cost(value), 0.0, cached=True))
                return value
        attempts = self.card.retries.attempts
        for attempt in range(1, attempts + 1):
            try:
                result = self._attempt(method, args, kwargs, ledger)
            except ExpertError as exc:
                if attempt == attempts or not _transient(exc):
                    raise
                time.sleep(self._backoff_s(attempt))
                continue
            if key is not None:
                assert self.cache is not None  # a call has a key only with a cache
                self.cache.put(key, result)
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _attempt(self, method: str, args: tuple, kwargs: dict, ledger: Ledger) -> Any:
        """One call under the concurrency limit and timeout, on an endpoint whose circuit breaker is closed, into
        the ledger."""
        start = time.perf_counter()
        cost = self.card.cost.per_call
        error: str | None = None
        failure: ExpertFailure | None = None
        result: Any = None
        breaker: Breaker | None = None  # the endpoint's, once the call reached one (only then does it move)
        try:
            allowed = self.breaker.closed()
            if not allowed:
                cost = 0.0  # refused before reaching the expert: nothing to charge
                raise ExpertUnavailable(f"model {self.name!r} is unavailable: "
                                        f"{self.breaker.reason() or 'circuit breaker open'}",
                                        failure=ExpertFailure.BREAKER_OPEN)
            experts = self._built()
            if not callable(getattr(experts[0], method, None)):
                raise ExpertError(f"model {self.name!r} has no method {method!r} (check its capabilities)")
            deadline = time.perf_counter() + self.card.timeout_s  # loading the model does not eat the call's time
            lease = self._slots.acquire(allowed, deadline, ledger.cancel)
            if lease is None:
                where = "on any endpoint " if len(self.urls) > 1 else ""
                raise ExpertTimeout(f"model {self.name!r}: no free slot {where}within {self.card.timeout_s}s")
            breaker = self.breaker.each[lease.endpoint]
            func = getattr(experts[lease.endpoint], method)
            stop = threading.Event()  # the call's own cancellation, seen by the expert through current_cancel()
            future = self._pool.submit(_cancellable_call, stop, func, args, kwargs)
            future.add_done_callback(lambda _f: self._slots.release(lease))
            try:
                result = wait_result(future, deadline, ledger.cancel)
            except FutureTimeout as exc:
                _abandon(future, stop)
                raise ExpertTimeout(f"model {self.name!r}.{method} timed out after {self.card.timeout_s}s") from exc
            except Cancelled:
                _abandon(future, stop)
                cost, breaker = 0.0, None  # abandoned by the episode: neither charged nor held against the expert
                raise
            except ExpertError:
                raise
            except Exception as exc:  # the expert's own crash (or an injected fault): record whose fault it was
                failure = ExpertFailure.INJECTED if isinstance(exc, InjectedFault) else ExpertFailure.CRASH
                raise ExpertError(f"model {self.name!r}.{method} failed: {exc.__class__.__name__}: {exc}",
                                  failure=failure) from exc
            self._check_result(method, func, result)
            cost = self._cost(result)
            breaker.record(ok=True)
            return result
        except (ExpertError, Cancelled) as exc:
            error = str(exc)
            failure = exc.failure if isinstance(exc, ExpertError) else None
            if breaker is not None:  # an input the expert rejected shows it alive: it does not move it toward open
                breaker.record(ok=failure == ExpertFailure.REJECTED)
            raise
        finally:
            ledger.calls.append(CallRecord.of(self.name, method, result, cost, time.perf_counter() - start,
                                              error=error, failure=failure))


def _cancellable_call(stop: threading.Event, func: Any, args: tuple, kwargs: dict) -> Any:
    """`func(*args, **kwargs)` on an expert thread, cancelled by `stop` (core.cancellation: an expert that looks
    at `current_cancel()` in its long loops stops when its call is abandoned)."""
    with cancellable(stop):
        return func(*args, **kwargs)


def _abandon(future: Any, stop: threading.Event) -> None:
    """A call nobody waits for any more (timed out, or its episode cancelled): one not started never runs, and one
    running is asked to stop, so its slot is not held by work whose result is thrown away, and keeps the memory its
    episode reserved until it does (core.shared_budget.outlive)."""
    stop.set()
    if not future.cancel():  # running: the episode's image memory stays held until it ends
        outlive(future)


class BoundExpert:
    """An expert as skill code sees it: `ctx.model.ocr(image)` calls through the handle into the step's ledger."""

    def __init__(self, handle: ExpertHandle, ledger: Ledger):
        self._handle = handle
        self._ledger = ledger

    @property
    def name(self) -> str:
        return self._handle.name

    @property
    def card(self) -> ModelCard:
        return self._handle.card

    def has(self, capability: str) -> bool:
        return capability in self._handle.card.capabilities

    def has_all(self, capabilities: tuple[str, ...] | list[str]) -> bool:
        return all(self.has(c) for c in capabilities)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._handle.call(method, args, kwargs, self._ledger)

        return call

