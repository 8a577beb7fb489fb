"""Fault injection: an expert wrapper that fails on purpose, configured per model card (`faults:` in the registry
file) and used by the fault tests and `maestro reliability`.

Real experts cannot be made to crash, hang or talk nonsense on demand; this wrapper makes each call of the wrapped
expert independently raise a transient error, hang, return an object of the wrong type or an oversized result,
with the card's probabilities and a seeded random stream, so a run is repeatable. Everything above the wrapper (the
handle's timeout, retries, circuit breaker and result checks, the registry's error steps, the policy) is the real
code under test.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from typing import Any

from ..experts.protocols import ChatReply
from .card_limits import MAX_RESULT_CHARS, MAX_RESULT_ITEMS
from .config import Faults

__all__ = ["FaultyExpert", "InjectedFault", "GARBAGE", "FAULT_KINDS", "oversized"]

FAULT_KINDS = ("error", "hang", "garbage", "oversized")
GARBAGE = b"\x89\x00 not what the protocol promised \xff"
"""What a garbage call returns: bytes, which no capability method declares."""


class InjectedFault(ConnectionError):
    """An injected transient failure (a ConnectionError, so the handle retries it like a dropped connection)."""

    transient = True


def oversized(result: Any, items: int, chars: int) -> Any:
    """A result of the same kind as `result` but above the handle's caps (`items` list items, `chars` characters)."""
    if isinstance(result, str):
        return "x" * (chars + 1)
    if isinstance(result, ChatReply):
        return dataclasses.replace(result, text="x" * (chars + 1))
    if isinstance(result, list) and result:
        return [result[0]] * (items + 1)
    return [result] * (items + 1)


class FaultyExpert:
    """Wraps an expert; every public method call draws one fault (or none) from the card's rates."""

    def __init__(self, expert: Any, faults: Faults, name: str):
        self._expert = expert
        self._faults = faults
        self._name = name
        self._rng = random.Random(f"{faults.seed}:{name}")
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        """How many faults of each kind were injected (and "none" for clean calls)."""

    def _draw(self) -> str:
        f = self._faults
        with self._lock:
            u = self._rng.random()
            kind = "none"
            for name, rate in (("error", f.error_rate), ("hang", f.hang_rate), ("garbage", f.garbage_rate),
                               ("oversized", f.oversized_rate)):
                if u < rate:
                    kind = name
                    break
                u -= rate
            self.injected[kind] += 1
        return kind

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._expert, method)
        if method.startswith("_") or not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = self._draw()
            if self._faults.latency_s:
                time.sleep(self._faults.latency_s)
            if kind == "error":
                raise InjectedFault(f"injected fault: {self._name}.{method} lost its connection")
            if kind == "hang":
                time.sleep(self._faults.hang_s)
            result = target(*args, **kwargs)
            if kind == "garbage":
                return GARBAGE
            if kind == "oversized":
                return oversized(result, MAX_RESULT_ITEMS, MAX_RESULT_CHARS)
            return result

        call.__wrapped__ = target  # type: ignore[attr-defined]  # the handle checks results against the real method's return annotation
        return call
