"""A process-wide budget of something held briefly by many threads at once (the memory of images being decoded):
a weighted semaphore whose holders wait for room (a door, which can answer "busy", for a bounded time; work already
admitted until there is room), and give up at once when their episode is cancelled. A single holder larger than the
whole budget is let in alone, so nothing is refused for its size here (size caps are the callers' job).

A piece of work that holds room for all it will do (an episode, for what its experts hold of its images) reserves
it (`reserve`): what it then holds of the same budget, on its own thread or on the threads it hands work to with its
context, is inside the reservation and takes nothing more, so work never waits for room it holds itself. Work the
piece abandons while it still runs (an expert call timed out or cancelled, whose thread cannot be stopped) keeps the
room (`outlive`): the reservation ends when that work does, not when the piece gives up on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar

from ..errors import MaestroError
from .cancellation import POLL_S, current_cancel, raise_if_cancelled

__all__ = ["SharedBudget", "BudgetExhausted", "outlive"]

_RESERVED: ContextVar[tuple[int, ...]] = ContextVar("maestro_reserved_budgets", default=())
"""The budgets (by `id`) a reservation of the current context already holds room in."""
_ABANDONED: ContextVar[list[Future] | None] = ContextVar("maestro_abandoned_work", default=None)
"""The work the innermost reservation of the current context has abandoned while it ran."""


def outlive(work: Future) -> None:
    """Keep the current context's innermost reservation (if any) until `work`, abandoned but perhaps still running,
    ends."""
    abandoned = _ABANDONED.get()
    if abandoned is not None and not work.done():
        abandoned.append(work)


class BudgetExhausted(MaestroError):
    """No room in the budget within the wait limit: the server is busy, not the request wrong (a 503 at a door).
    `retry_after_s` is a fair time to wait before trying again."""

    def __init__(self, message: str, *, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class SharedBudget:
    """`limit` units in flight across every thread of the process; `hold(units)` waits for room."""

    def __init__(self, limit: int, *, unit: str):
        self.unit = unit
        self._room = threading.Condition()
        self._used = 0
        self.peak = 0
        """The most units held at once since the budget was made (for tests and reports)."""
        self.waited = 0
        """How many holders found no room at first and waited (for tests and reports)."""
        self.configure(limit)

    def configure(self, limit: int) -> None:
        """Set the limit (an operator's setting, applied when a server starts); holders keep what they hold."""
        if limit <= 0:
            raise ValueError(f"a budget needs a limit above 0 (got {limit})")
        with self._room:
            self.limit = limit
            self._room.notify_all()

    @property
    def used(self) -> int:
        return self._used

    @contextmanager
    def hold(self, units: int, what: str, *, wait_s: float | None = None) -> Iterator[None]:
        """Hold `units` (at most the whole limit) while the block runs. Waits for room until there is some (None), or
        at most `wait_s` and BudgetExhausted then; Cancelled as soon as the current episode is cancelled
        (core.cancellation)."""
        if id(self) in _RESERVED.get():  # inside a reservation of this budget: its room is already held
            yield
            return
        units = self._take(units, what, wait_s)
        try:
            yield
        finally:
            self._give(units)

    def _take(self, units: int, what: str, wait_s: float | None) -> int:
        cancel = current_cancel()
        deadline = None if wait_s is None else time.monotonic() + wait_s
        with self._room:
            units = max(0, min(units, self.limit))
            self.waited += self._used + units > self.limit
            while self._used + units > self.limit:
                raise_if_cancelled(cancel)
                left = POLL_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise BudgetExhausted(
                        f"{what}: the server is working on other images ({self._used:,} of {self.limit:,} {self.unit} "
                        f"in use, {units:,} needed) and found no room within {wait_s:g} s; retry shortly",
                        retry_after_s=max(1, round(wait_s or 1)))
                self._room.wait(min(left, POLL_S))
            self._used += units
            self.peak = max(self.peak, self._used)
        return units

    def _give(self, units: int) -> None:
        with self._room:
            self._used -= units
            self._room.notify_all()

    @contextmanager
    def reserve(self, units: int, what: str, *, wait_s: float | None = None) -> Iterator[None]:
        """`hold(units)` for a whole piece of work: inside the block, and in the contexts copied from it, holding
        this budget again takes nothing (the reservation covers it). Work abandoned in the block (`outlive`) keeps
        the units after the block until it ends."""
        if id(self) in _RESERVED.get():
            yield
            return
        units = self._take(units, what, wait_s)
        abandoned: list[Future] = []
        tokens = _RESERVED.set((*_RESERVED.get(), id(self))), _ABANDONED.set(abandoned)
        try:
            yield
        finally:
            _RESERVED.reset(tokens[0])
            _ABANDONED.reset(tokens[1])
            self._give_after(units, [w for w in abandoned if not w.done()])

    def _give_after(self, units: int, running: list[Future]) -> None:
        """Give `units` back once every one of `running` is done (now, when none is left)."""
        if not running:
            self._give(units)
            return
        left = [len(running)]
        lock = threading.Lock()

        def one_done(_: Future) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self._give(units)

        for work in running:
            work.add_done_callback(one_done)
