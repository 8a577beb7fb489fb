"""Cancelling an episode whose caller is gone (a request that timed out, a client that disconnected).

The caller sets an Event; the episode sees it through a context variable set around the graph run (LangGraph and
the skill threads copy the context), so nothing on the way (graph state, run context, skill signatures) carries
it. The router stops at its next decision, a skill step is abandoned, and an expert call that is waiting is
abandoned at once: its thread finishes in the background, within the card's own limits, but the episode's worker
is free again.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from .errors import Cancelled

__all__ = ["cancellable", "current_cancel", "raise_if_cancelled", "Cancelled", "POLL_S"]

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
