"""Data that crosses boundaries: actions chosen by a policy, skill results, and the steps of an episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["PAIR_SEP", "Invoke", "Answer", "Action", "InvalidAction", "SkillResult", "Step", "pair_id", "split_pair"]

PAIR_SEP = "@@"

ErrorKind = Literal["policy", "expert", "input", "skill"]


def pair_id(model: str, skill: str) -> str:
    return f"{model}{PAIR_SEP}{skill}"


def split_pair(pair: str) -> tuple[str, str]:
    """Parse a canonical `model@@skill` id; anything else is None-free ValueError (no fuzzy matching)."""
    model, sep, skill = pair.strip().partition(PAIR_SEP)
    if not sep or not model or not skill or PAIR_SEP in skill:
        raise ValueError(f"{pair!r} is not a `model{PAIR_SEP}skill` id")
    return model, skill


@dataclass(frozen=True)
class Invoke:
    """Call one expert pair. `input` is the policy's request text; empty means "the question"."""

    model: str
    skill: str
    input: str = ""

    @property
    def pair(self) -> str:
        return pair_id(self.model, self.skill)


@dataclass(frozen=True)
class Answer:
    """Stop and answer. `text=None` is an explicit no-answer."""

    text: str | None


Action = Invoke | Answer


@dataclass(frozen=True)
class InvalidAction:
    """A policy output that is no action (an LM completion without one well-formed tag, or an LM endpoint that
    failed). The router records it as an error step (error_kind "policy") that costs a turn and is penalised; it is
    never re-routed to a guessed action. `text` is the raw output, `reason` the observation the policy reads next."""

    text: str
    reason: str


@dataclass
class SkillResult:
    """What tier-1 skill code returns: evidence for the policy and, when it has one, a candidate answer."""

    evidence: str
    answer: str | None = None
    confidence: float = 0.5
    details: dict = field(default_factory=dict)


class Step(BaseModel):
    """One executed (or refused) action of an episode, as recorded in the state, traces and prediction files."""

    model: str
    skill: str
    input: str = ""
    evidence: str = ""
    answer: str | None = None
    confidence: float = 0.0
    cost: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None
    calls: list[dict] = Field(default_factory=list, description="expert calls made inside the skill")
    cached: bool = Field(False, description="replayed from the step cache (latency is the replay's)")

    @property
    def pair(self) -> str:
        return pair_id(self.model, self.skill)
