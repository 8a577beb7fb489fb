"""The run context of the Maestro graph (LangGraph's `context_schema`): the per-run settings a caller may choose,
read the same way whether Maestro runs alone or as a subgraph under a parent graph's own context."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, WithJsonSchema

from ..core.configs import DEFAULT_EPISODES_KEPT, MAX_COST, MAX_EPISODES_KEPT, MAX_TURNS, Budget
from ..errors import ConfigError, first_validation_problem
from ..registry.reach import REACH_FLOOR

__all__ = ["CONTEXT_KEY", "REQUEST_SETTINGS", "MaestroContext", "RunSettings"]


CONTEXT_KEY = "maestro"
"""The namespace of Maestro's settings in a parent graph's run context (a key of a mapping or an attribute)."""
_STEPS_PER_TURN = 2
"""LangGraph supersteps of one turn: the router's decision, then the skill node's call."""
_STEPS_BESIDE_TURNS = 6
"""Supersteps outside the turns, with a margin: intake, the decision that answers, the answer node."""


@dataclass
class MaestroContext(Budget):
    """Per-run settings (LangGraph runtime context): the budget (its fields first, `configs.Budget`) and which policy
    decides."""

    policy: str | None = None
    """A policy name overriding the graph's policy for this run (e.g. "fixed:rapidocr@@chart-qa")."""
    greedy: bool = True
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    episodes_kept: Annotated[int, Field(ge=1, le=MAX_EPISODES_KEPT)] = DEFAULT_EPISODES_KEPT
    """The most finished episodes a thread keeps in `episodes` (the latest; older ones are dropped when an episode
    ends), so that each checkpoint of a long thread stays bounded. The skills see at most `MAX_HISTORY_TURNS` of
    them."""
    reach_floor: Annotated[float, Field(ge=0, le=1)] = REACH_FLOOR
    """Before each call: when the registry's reach (`Registry.reach`: the similarity-weighted share of the 10 most
    similar calibration questions that one of the pairs not yet called answered, known only where those are close
    to the question) is below this, the episode ends without a further call, with what the answer node can give (the
    best candidate so far, else a marked guess for choice and yes/no questions). 0 turns it off; a registry without
    a reach, and a question unlike every calibration question, are never stopped."""
    min_confidence: Annotated[float, Field(ge=0, le=1)] = 0.0
    """An answer less sure than this (its `confidence`: the probability that it is right) is withheld: the episode
    ends without an answer, stopped for low confidence ("I could not find out"), so a parent graph or a calling
    agent can escalate instead of trusting a guess. 0: every answer is given."""

    @property
    def recursion_limit(self) -> int:
        """The run's LangGraph step limit (`recursion_limit`), from the turn budget. LangGraph reads it from the run's
        config, not from its context, so whoever starts a run passes it there."""
        return _STEPS_PER_TURN * self.max_turns + _STEPS_BESIDE_TURNS

    @classmethod
    def of(cls, context: object) -> MaestroContext:
        """Maestro's settings from whatever context the run has, so Maestro runs under any parent graph's own
        context schema: a MaestroContext as it is; else what the `maestro` namespace holds (a key of a mapping or
        an attribute: a MaestroContext or a mapping of its fields); else the fields Maestro knows, read from the
        context's keys or attributes. Missing fields take their defaults and other keys are ignored. Every field is
        validated, a MaestroContext's too: the Agent Server builds one from a client's JSON without checking it
        (`MaestroContext(**context)`), so a wrong type or a value out of bounds is a ConfigError naming the field and
        the value (the run then ends with an input error)."""
        if context is None:
            return cls()
        scoped = context.get(CONTEXT_KEY) if isinstance(context, Mapping) else getattr(context, CONTEXT_KEY, None)
        source = context if isinstance(context, cls) or scoped is None else scoped
        names = [f.name for f in fields(cls)]
        if isinstance(source, Mapping):
            found = {n: source[n] for n in names if n in source}
        else:
            found = {n: getattr(source, n) for n in names if hasattr(source, n)}
        try:
            return _CONTEXT.validate_python(found)
        except ValidationError as exc:
            raise ConfigError(first_validation_problem(exc)[1], field="context") from None


_CONTEXT = TypeAdapter(MaestroContext)


REQUEST_SETTINGS = ("policy", "max_turns", "max_cost", "min_confidence")
"""The run settings a client of an HTTP door may choose in its request body (the rest of the context is the
operator's: `maestro serve`'s options)."""

_HINTS = typing.get_type_hints(MaestroContext, include_extras=True)


def _requested(name: str) -> Any:
    """The type of a request's `name`: MaestroContext's own (its bounds), strict (a number is a JSON number, not a
    string or a boolean) and finite (no NaN or Infinity, which Python's JSON reader accepts), or left out."""
    hint = _HINTS[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    field = Field(strict=True, allow_inf_nan=False) if name in ("max_cost", "min_confidence") else Field(strict=True)
    # Optional (an error names the field alone, not a branch of a union) with the schema of the value only (the
    # LangServe playground's form cannot render a `null` branch)
    return Annotated[Annotated[hint, field] | None, WithJsonSchema(TypeAdapter(hint).json_schema())]


if TYPE_CHECKING:  # what the types `_requested` builds are, to the checker (which reads no type made by a call)
    _Policy = str | None
    _MaxTurns = int | None
    _MaxCost = float | None
    _MinConfidence = float | None
else:
    _Policy = _requested("policy")
    _MaxTurns = _requested("max_turns")
    _MaxCost = _requested("max_cost")
    _MinConfidence = _requested("min_confidence")


class RunSettings(BaseModel):
    """The run settings of one request, validated the same on every HTTP door (the OpenAI route's body, LangServe's
    input): each `REQUEST_SETTINGS` field with MaestroContext's type and bounds, so a value out of range, of the
    wrong type, NaN or infinite is refused where the request enters instead of being ignored or clamped. A field
    left out takes the server's default (`maestro serve`'s options)."""

    model_config = ConfigDict(extra="forbid")

    policy: _Policy = Field(None, description="one of the policies the server offers")
    max_turns: _MaxTurns = Field(
        None, description=f"most expert calls (1 to {MAX_TURNS}; the server's own limit caps it)")
    max_cost: _MaxCost = Field(
        None, description=f"cost budget (0 to {MAX_COST:g}; the server's own limit caps it)")
    min_confidence: _MinConfidence = Field(
        None, description="0 to 1: an answer less sure than this is withheld (MaestroContext.min_confidence)")
