"""Expert handles: lazy construction, per-card timeout and concurrency, and cost accounting of every call.

Skills never hold an expert object directly; they call methods on a `BoundExpert`, which records each call (cost,
latency, error) in the step's ledger. A call that exceeds the card's timeout raises `ExpertTimeout`; the worker
thread cannot be killed and finishes in the background, but the episode goes on without it.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from ..cache import ExpertCache, Uncacheable, cache_key
from ..errors import ConfigError, ExpertError, ExpertTimeout, ExpertUnavailable
from ..experts.protocols import ChatReply
from .config import ModelCard, OpenAIBackend, PythonBackend, TransformersBackend

__all__ = ["ExpertHandle", "BoundExpert", "CallRecord", "Ledger"]

_POOL = ThreadPoolExecutor(max_workers=max(8, (os.cpu_count() or 2) * 4), thread_name_prefix="maestro-expert")


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


@dataclass
class CallRecord:
    model: str
    method: str
    cost: float
    latency_s: float
    error: str | None = None
    cached: bool = False


@dataclass
class Ledger:
    """The expert calls made while one step ran."""

    calls: list[CallRecord] = field(default_factory=list)

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls)


class ExpertHandle:
    """One model card's expert, created on first use and shared by every episode in the process."""

    def __init__(self, card: ModelCard, cache: ExpertCache | None = None):
        self.card = card
        self.cache = cache if card.cacheable else None
        self._expert: Any = None
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(card.concurrency)
        self._unavailable: str | None | bool = False  # False = not checked yet
        self._check_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.card.name

    def unavailable_reason(self) -> str | None:
        """Why this expert cannot run here, or None. Cheap: it does not load the model. Checked once."""
        with self._check_lock:
            if self._unavailable is False:
                self._unavailable = self._check()
            return self._unavailable  # type: ignore[return-value]

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
            if backend.api_key_env and not os.environ.get(backend.api_key_env):
                return f"environment variable {backend.api_key_env} (the API key) is not set"
            return None
        if isinstance(backend, TransformersBackend):
            from ..experts.transformers_chat import TransformersChatExpert

            return TransformersChatExpert.unavailable_reason(**backend.model_dump(exclude={"type"}))
        return None  # pragma: no cover - the discriminated union has no other member

    def expert(self) -> Any:
        with self._lock:
            if self._expert is None:
                reason = self.unavailable_reason()
                if reason:
                    raise ExpertUnavailable(f"model {self.name!r} is unavailable: {reason}")
                self._expert = self._build()
            return self._expert

    def _build(self) -> Any:
        backend = self.card.backend
        if isinstance(backend, PythonBackend):
            return _import_entry(backend.entry)(**backend.options)
        if isinstance(backend, OpenAIBackend):
            from ..experts.openai_chat import OpenAIChatExpert

            return OpenAIChatExpert(**backend.model_dump(exclude={"type"}), timeout_s=self.card.timeout_s)
        from ..experts.transformers_chat import TransformersChatExpert

        return TransformersChatExpert(**backend.model_dump(exclude={"type"}))

    def _cost(self, result: Any) -> float:
        cost = self.card.cost.per_call
        if isinstance(result, ChatReply):
            cost += self.card.cost.per_1k_tokens * result.tokens / 1000
        return cost

    def call(self, method: str, args: tuple, kwargs: dict, ledger: Ledger) -> Any:
        """Run one expert method under the card's concurrency limit and timeout; record it in the ledger."""
        key = None
        if self.cache is not None:
            try:
                key = cache_key("call", self.name, self.card.version, method, list(args), kwargs)
            except Uncacheable:
                key = None
        if key is not None:
            hit, value = self.cache.get(key)
            if hit:  # a cached call is charged as the call it replays, with no latency
                ledger.calls.append(CallRecord(self.name, method, self._cost(value), 0.0, None, cached=True))
                return value
        start = time.perf_counter()
        cost = self.card.cost.per_call
        error: str | None = None
        try:
            expert = self.expert()
            func = getattr(expert, method, None)
            if not callable(func):
                raise ExpertError(f"model {self.name!r} has no method {method!r} (check its capabilities)")
            deadline = time.perf_counter() + self.card.timeout_s  # loading the model does not eat the call's time
            if not self._slots.acquire(timeout=self.card.timeout_s):
                raise ExpertTimeout(f"model {self.name!r}: no free slot within {self.card.timeout_s}s")
            future = _POOL.submit(func, *args, **kwargs)
            future.add_done_callback(lambda _f: self._slots.release())
            try:
                result = future.result(timeout=max(0.0, deadline - time.perf_counter()))
            except FutureTimeout as exc:
                raise ExpertTimeout(f"model {self.name!r}.{method} timed out after {self.card.timeout_s}s") from exc
            except ExpertError:
                raise
            except Exception as exc:  # the expert's own crash: record whose fault it was
                raise ExpertError(f"model {self.name!r}.{method} failed: {exc.__class__.__name__}: {exc}") from exc
            cost = self._cost(result)
            if key is not None:
                self.cache.put(key, result)
            return result
        except ExpertError as exc:
            error = str(exc)
            raise
        finally:
            ledger.calls.append(CallRecord(self.name, method, cost, time.perf_counter() - start, error))


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

