"""Data that crosses boundaries: actions chosen by a policy, skill results, and the steps of an episode."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import (
    Annotated,
    Literal,
    NotRequired,  # pydantic builds JSON schemas from it on Python < 3.12
)

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

__all__ = ["PAIR_SEP", "ErrorKind", "StopReason", "stop_text", "Decision", "Invoke", "Answer", "Action",
           "InvalidAction", "SkillResult", "Step", "Turn", "Probability", "pair_id", "split_pair"]

PAIR_SEP = "@@"



class StopReason(StrEnum):
    """Why an episode ended, set where it ends. The policy answered; the turn or cost budget ran out (the answer is
    the policy's pick among the candidates); nothing fits (every pair left belongs to a skill that declines the
    question from its text, or the registry's reach is below the run's floor: the graph answered without another
    call); the input was at fault (refused image, bad context, every step failed on its input); the caller went away;
    or the episode itself crashed (a batch run records it and goes on)."""

    POLICY = "policy"
    BUDGET = "budget"
    OUT_OF_REACH = "out of reach"
    LOW_CONFIDENCE = "low confidence"
    INPUT_ERROR = "input error"
    CANCELLED = "cancelled"
    ERROR = "error"


def stop_text(stop: StopReason, detail: str | None = None) -> str:
    """The stop reason as clients and prediction files show it: the kind, and for an input error its reason
    (`input error: image 0: ...`)."""
    return f"{stop}: {detail}" if detail else str(stop)


class ErrorKind(StrEnum):
    """Whose fault a failed step was: the policy's (an invalid action, a malformed LM output), the expert's, the
    request's input, the skill code's, or the node's it ran on (its disk, memory or files: an OSError or MemoryError
    outside the expert's call), which a batch run reports as lost capacity. Set where the error is raised, never
    parsed from its message."""

    POLICY = "policy"
    EXPERT = "expert"
    INPUT = "input"
    SKILL = "skill"
    NODE = "node"


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


Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A probability as clients may write one (a confidence): a finite number in [0, 1]."""


class Turn(TypedDict):
    """One earlier exchange of a conversation: a question asked before and the answer it got (None: none). A
    follow-up ("How many letters does it have?") means something only next to these. `images`: those sent with
    that question, when the client keeps the conversation (an OpenAI chat's earlier user message): the latest of
    them is the conversation's image for a follow-up that sends none (episode.conversation). `confidence`: how sure
    that answer was, where it is known (a thread's finished episodes): an answer computed from it is no surer
    (episode.followups)."""

    question: str
    answer: str | None
    images: NotRequired[list[str]]
    confidence: NotRequired[Probability | None]


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


class Decision(BaseModel):
    """One router decision, recorded as it was made: the action, its log-probability and the entropy of the acting
    policy's distribution. Trainers read it instead of re-deriving what the router did. `log_prob` is None when the
    graph overruled the policy (it asked for a call after the budget was spent; the graph answered); `forced` marks
    an answer the graph gave without asking (budget spent, one candidate: log-probability 0)."""

    turn: int = Field(description="steps taken before this decision")
    policy: str
    kind: Literal["invoke", "answer", "invalid"]
    pair: str | None = None
    input: str = ""
    text: str | None = Field(None, description="the answer, or an invalid output's raw text")
    reason: str | None = Field(None, description="why an output was no action")
    log_prob: float | None = None
    entropy: float | None = None
    forced: bool = False
    latency_s: float | None = Field(None, description="seconds the policy took to decide (None: the graph decided "
                                                      "without asking it)")

    @classmethod
    def of(cls, action: Invoke | Answer | InvalidAction, *, turn: int, policy: str, log_prob: float | None,
           entropy: float | None, forced: bool = False, latency_s: float | None = None) -> Decision:
        common = {"turn": turn, "policy": policy, "log_prob": log_prob, "entropy": entropy, "forced": forced,
                  "latency_s": latency_s}
        if isinstance(action, Invoke):
            return cls(kind="invoke", pair=action.pair, input=action.input, **common)
        if isinstance(action, Answer):
            return cls(kind="answer", text=action.text, **common)
        return cls(kind="invalid", text=action.text, reason=action.reason, **common)

    def action(self) -> Invoke | Answer | InvalidAction:
        if self.kind == "invoke":
            model, skill = split_pair(self.pair or "")
            return Invoke(model, skill, self.input)
        if self.kind == "answer":
            return Answer(self.text)
        return InvalidAction(self.text or "", self.reason or "")
