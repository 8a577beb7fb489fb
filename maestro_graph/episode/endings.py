"""How an episode ends, as the state updates that say so: the typed stop reason, its detail and the text clients
see. Intake, the router, the skill nodes and the answer node all end episodes with these."""

from __future__ import annotations

from langgraph.types import Overwrite

from ..policy import EpisodeView
from ..types import ErrorKind, StopReason, stop_text

__all__ = ["ending", "stop_update", "voided"]


def stop_update(stop: StopReason, detail: object = None) -> dict:
    """The state update that ends an episode for `stop`: the typed kind (as its string), its detail, and the text
    clients see."""
    text = str(detail) if detail is not None else None
    return {"stop": stop.value, "stop_detail": text, "stop_reason": stop_text(stop, text)}


def voided(problem: object) -> dict:
    """The update of an episode whose state or call a client's `Command` wrote wrong: it ends on the input error,
    emptied (what the state holds is not to be read)."""
    return {"answer": None, "steps": Overwrite([]), "decisions": Overwrite([]),
            **stop_update(StopReason.INPUT_ERROR, problem)}


def ending(view: EpisodeView, answer: str | None) -> dict:
    """Why an episode ends with `answer`: a no-answer after every step that ran a skill failed on its input (a
    missing or unreadable image) is the input's fault and says so; else the budget, or the policy's choice."""
    ran = [s for s in view.steps if s.error_kind != ErrorKind.POLICY]
    if answer is None and ran and all(s.error_kind == ErrorKind.INPUT for s in ran):
        return stop_update(StopReason.INPUT_ERROR, ran[0].error)
    return stop_update(StopReason.BUDGET if view.budget_spent else StopReason.POLICY)
