"""The fields of an episode's state that its nodes read, checked where they are read.

A client of the Agent Server may send a `Command` that writes any value into any field of a thread's state and
jumps to any node (`graph.invoke(Command(update=..., goto=...))` does the same in-process), so a node cannot trust
the types its own nodes write: `stop: "bogus"`, `pending: "x"` or `steps: [{"junk": 1}]` would otherwise end the
run with a bare ValueError, AttributeError or ValidationError. `state_problem` names the first wrong field and its
value, and the node ends the episode with the typed input error, as for any other bad input.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic validates TypedDicts from typing_extensions on Python < 3.12

from ..types import Decision, Step, StopReason, Turn

__all__ = ["INPUT_FIELDS", "appended", "state_problem"]

_SHOWN = 120
"""The most characters of a wrong value that the problem quotes (a Command may write megabytes)."""


class _Pending(TypedDict):
    model: str
    skill: str
    input: str


class _Finished(TypedDict):
    question: str
    answer: str | None


class _Written(TypedDict, total=False):
    question: str | None
    images: list[str] | None
    choices: list[str] | None
    history: list[Turn] | None
    steps: list[Step]
    decisions: list[Decision]
    pending: _Pending | None
    stop: StopReason | None
    stop_detail: str | None
    stop_reason: str | None
    answer: str | None
    answer_source: Literal["policy", "candidate", "guess"] | None
    episodes: list[_Finished]


_WRITTEN = TypeAdapter(_Written)
INPUT_FIELDS = ("question", "images", "choices", "history", "episodes")
"""What intake reads (it resets the rest of the episode's fields; the finished episodes are the history)."""
_NODE_FIELDS = tuple(name for name in _Written.__annotations__ if name != "episodes")
"""What the router, the skill nodes and the answer node read."""


def state_problem(state: Mapping[str, Any], names: tuple[str, ...] | None = None) -> str | None:
    """The first wrong field among `names` (default: every field a node reads) as "state.FIELD: why (got VALUE)",
    or None when they all have their types."""
    values = {name: state[name] for name in (names or _NODE_FIELDS) if name in state}
    try:
        _WRITTEN.validate_python(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= _SHOWN else f"{shown[:_SHOWN]}... ({len(shown):,} characters)"
        return f"state.{where}: {error['msg']} (got {shown})"
    return None


def appended(old: list, new: Any) -> list:
    """The reducer of the per-episode lists (`steps`, `decisions`): `operator.add`, except that a write that is not
    a list (a Command's `steps: "x"`) is kept as one item, which `state_problem` then names, instead of a TypeError
    inside LangGraph before any node runs."""
    return [*old, *new] if isinstance(new, list) else [*old, new]
