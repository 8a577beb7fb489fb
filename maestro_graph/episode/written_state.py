"""The fields of an episode's state that its nodes read, and the call a skill node is sent, checked where they are
read and handed to the node typed.

A client of the Agent Server may send a `Command` that writes any value into any field of a thread's state and
jumps to any node, or sends any payload to a skill node (`graph.invoke(Command(update=..., goto=...))` does the same
in-process), so a node cannot trust the types its own nodes write: `stop: "bogus"`, a call `"x"` or
`steps: [{"junk": 1}]` would otherwise end the run with a bare ValueError, AttributeError or ValidationError.
`read_state` and `read_call` validate what a node reads into the typed objects it works with (`types.Step`,
`types.Decision`, `types.StopReason`), and a wrong value is a `BadState` naming the field and the value, on which the
node ends the episode with the typed input error, as for any other bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

# pydantic validates TypedDicts from typing_extensions on Python < 3.12
from typing_extensions import NotRequired, TypedDict  # noqa: UP035

from ..errors import InputError
from ..types import Decision, Probability, Step, StopReason, Turn
from .state import AnswerSource, SkillCall

__all__ = ["INPUT_FIELDS", "BadState", "WrittenState", "read_call", "read_state"]

_SHOWN = 120
"""The most characters of a wrong value that the problem quotes (a Command may write megabytes)."""


class _Finished(TypedDict):
    question: str
    answer: str | None
    confidence: NotRequired[Probability | None]


class WrittenState(TypedDict, total=False):
    """The state's fields that nodes read, typed (those present in the state)."""

    question: str | None
    images: list[str] | None
    choices: list[str] | None
    history: list[Turn] | None
    steps: list[Step]
    decisions: list[Decision]
    stop: StopReason | None
    stop_detail: str | None
    stop_reason: str | None
    answer: str | None
    answer_source: AnswerSource | None
    confidence_cap: Probability | None
    episodes: list[_Finished]


_WRITTEN = TypeAdapter(WrittenState)
_CALL = TypeAdapter(SkillCall)
INPUT_FIELDS = ("question", "images", "choices", "history", "episodes")
"""What intake reads (it resets the rest of the episode's fields; the finished episodes are the history)."""
_NODE_FIELDS = tuple(name for name in WrittenState.__annotations__ if name != "episodes")
"""What the router, the skill nodes and the answer node read."""


class BadState(InputError):
    """A field of the state, or a skill node's call, holds a value of the wrong type (written by a client's
    `Command`); the message is "FIELD: why (got VALUE)"."""


def read_state(state: Mapping[str, Any], names: tuple[str, ...] | None = None) -> WrittenState:
    """The fields among `names` (default: every field a node reads) that the state has, typed; BadState names the
    first wrong one as "state.FIELD: ..."."""
    return _validated(_WRITTEN, {name: state[name] for name in (names or _NODE_FIELDS) if name in state}, "state")


def read_call(payload: Any) -> SkillCall:
    """A skill node's payload, checked (a node reached by a `Command` without a `Send` gets the whole state, which
    has no call); BadState names the first wrong field as "call.FIELD: ..."."""
    return _validated(_CALL, payload, "call")


def _validated(adapter: TypeAdapter, value: Any, name: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in (name, *error["loc"]))
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= _SHOWN else f"{shown[:_SHOWN]}... ({len(shown):,} characters)"
        raise BadState(f"{where}: {error['msg']} (got {shown})") from None
