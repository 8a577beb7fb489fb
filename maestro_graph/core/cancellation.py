"""Cancelling an episode whose caller is gone (a request that timed out, a client that disconnected).

The caller sets an Event; the episode sees it through a context variable set around the graph run (LangGraph and
the skill threads copy the context), so nothing on the way (graph state, run context, skill signatures) carries
it. The router stops at its next decision, a skill step is abandoned, and an expert call that is waiting is
abandoned at once: its thread finishes in the background, within the card's own limits, but the episode's worker
is free again.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..errors import Cancelled

__all__ = ["cancellable", "current_cancel", "raise_if_cancelled", "run_abandonable", "wait_result", "Cancelled",
           "POLL_S"]

POLL_S = 0.05
"""How often a waiting expert call or skill step looks at the cancel event."""

_cancel: ContextVar[threading.Event | None] = ContextVar("maestro_cancel", default=None)


@contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Everything run inside (in this context and the contexts copied from it) is cancelled by `event`."""
    token = _cancel.set(event)
    try:
        yield
    finally:
        _cancel.reset(token)


def current_cancel() -> threading.Event | None:
    return _cancel.get()


def raise_if_cancelled(event: threading.Event | None) -> None:
    if event is not None and event.is_set():
        raise Cancelled("the episode was cancelled (its request timed out or its client left)")


def run_abandonable(func: Callable[..., Any], *args: Any, timeout_s: float | None = None,
                    cancel: threading.Event | None = None) -> Any:
    """`func(*args)` on a daemon thread of its own (with this context), waited for at most `timeout_s`
    (FutureTimeout beyond; None: no limit) and abandoned when `cancel` is set (Cancelled). Work that cannot be
    interrupted (a hung skill, a blocking HTTP call to a router LM) finishes in the background; its thread is not
    taken from any shared pool, so it never starves other episodes."""
    future: Future = Future()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            future.set_result(context.run(func, *args))
        except BaseException as exc:  # handed to the waiting caller, which records it
            future.set_exception(exc)

    threading.Thread(target=target, name="maestro-abandonable", daemon=True).start()
    return wait_result(future, None if timeout_s is None else time.perf_counter() + timeout_s, cancel)


def wait_result(future: Future, deadline: float | None, cancel: threading.Event | None) -> Any:
    """The future's result before `deadline` (a `time.perf_counter()` value; None: no limit; FutureTimeout after
    it), looking at `cancel` every POLL_S and raising Cancelled as soon as it is set (the work is left to finish
    on its own thread)."""
    while cancel is not None:
        raise_if_cancelled(cancel)
        left = POLL_S if deadline is None else deadline - time.perf_counter()
        try:
            return future.result(timeout=max(0.0, min(left, POLL_S)))
        except FutureTimeout:
            if deadline is not None and left <= POLL_S:
                raise
    return future.result(timeout=None if deadline is None else max(0.0, deadline - time.perf_counter()))
