"""The run context of the Maestro graph (LangGraph's `context_schema`): the per-run settings a caller may choose,
read the same way whether Maestro runs alone or as a subgraph under a parent graph's own context."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Mapping

from pydantic import Field, TypeAdapter, ValidationError

from ..core.configs import DEFAULT_EPISODES_KEPT, MAX_EPISODES_KEPT, Budget
from ..errors import ConfigError, first_validation_problem
from ..registry.reach import REACH_FLOOR

__all__ = ["CONTEXT_KEY", "MaestroContext", "episodes_kept"]


CONTEXT_KEY = "maestro"
"""The namespace of Maestro's settings in a parent graph's run context (a key of a mapping or an attribute)."""


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

    @classmethod
    def of(cls, context: object) -> "MaestroContext":
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


def episodes_kept(context: object) -> int:
    """The run's `episodes_kept` (its default when the context is unusable: the run has already ended on it)."""
    try:
        return MaestroContext.of(context).episodes_kept
    except ConfigError:
        return DEFAULT_EPISODES_KEPT
