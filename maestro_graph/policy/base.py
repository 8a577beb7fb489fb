"""The policy protocol: given what the episode has seen and the current action set, a distribution over actions.

Like a Gym agent, a policy sees an observation (`EpisodeView`: question, image references, choices, the steps so far
and the budget, never the task's answer, source, domain or meta) and an action space (`ActionSpace`: the valid pairs
with their cards, and the candidate answers gathered so far). It returns a `Distribution`, so the same object
serves sampling (training) and greedy decoding (serving).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..core.tasks import Task
from ..registry.pair import Pair
from ..scoring import normalize_text
from ..types import Action, Answer, InvalidAction, Invoke, Step

if TYPE_CHECKING:  # a policy reads pairs; the registry that holds the experts is only passed in
    from ..registry.registry import Registry

__all__ = ["EpisodeView", "ActionSpace", "Distribution", "Policy", "best_candidate", "measured_accuracy"]


def best_candidate(steps: list[Step] | tuple[Step, ...]) -> str | None:
    """The candidate answer with the most support: agreement between steps first, then confidence."""
    support: dict[str, float] = {}
    first: dict[str, str] = {}
    votes: Counter[str] = Counter()
    for step in steps:
        if step.error or step.answer is None:
            continue
        key = normalize_text(step.answer)
        first.setdefault(key, step.answer)
        votes[key] += 1
        support[key] = max(support.get(key, 0.0), step.confidence)
    if not votes:
        return None
    key = max(votes, key=lambda k: (votes[k], support[k]))
    return first[key]


@dataclass(frozen=True)
class EpisodeView:
    """What a policy may see of an episode."""

    question: str
    images: tuple[str, ...]
    choices: tuple[str, ...] | None
    steps: tuple[Step, ...]
    max_turns: int
    max_cost: float

    @classmethod
    def of_task(cls, task: Task, steps: tuple[Step, ...], max_turns: int, max_cost: float) -> EpisodeView:
        """What the router sees of a task after `steps`, as the graph builds it: the choices are the task's options
        (written inline in the question when it has none), as the graph's intake sets them."""
        options = task.options
        return cls(task.question, tuple(task.images), tuple(options) if options else None, tuple(steps), max_turns,
                   max_cost)

    @property
    def turn(self) -> int:
        return len(self.steps)

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)

    @property
    def turns_left(self) -> int:
        return self.max_turns - self.turn

    @property
    def cost_left(self) -> float:
        return self.max_cost - self.cost

    @property
    def budget_spent(self) -> bool:
        """No call may be made any more; the policy still chooses which candidate to answer with."""
        return self.turns_left <= 0 or self.cost_left <= 0

    def called(self, pair: str) -> bool:
        return any(s.pair == pair for s in self.steps)

    def candidates(self) -> list[str]:
        """Distinct candidate answers so far, in the order they appeared."""
        seen: dict[str, str] = {}
        for step in self.steps:
            if not step.error and step.answer is not None:
                seen.setdefault(normalize_text(step.answer), step.answer)
        return list(seen.values())


def measured_accuracy(registry: Registry, question: str, images: Sequence[str], choices: Sequence[str] | None
                      ) -> dict[str, float]:
    """By pair id, how each of the registry's pairs did on the calibration questions most like this one (its
    reach, `Reach.pair_accuracy`): what the neural policy reads of a pair, and what an LM router's prompt may show.
    Absent for a pair the reach did not measure or whose profile is hidden (training's profile dropout,
    `Registry.without`); empty without a reach."""
    profiled = [p.id for p in registry.pairs() if p.profile is not None]
    if registry.reach is None or not profiled:
        return {}
    return registry.reach.pair_accuracy(question, images, choices, profiled)


@dataclass(frozen=True)
class ActionSpace:
    """The actions valid now: invoking any available compatible pair whose call cost fits the budget, whose skill
    does not decline the question from its text (`SkillSpec.declines`: such a call is bound to return nothing, so
    no policy spends a turn on it) and, when the request has no image, whose skill answers without one
    (`SkillSpec.needs_image`); or answering with one of the candidates (or an explicit no-answer when there is
    none). Once the budget is spent, only answers.

    Without an image, a question that an image skill claims from its text (its `declines` check accepts it: "Do
    any two of the circles touch?") and no text skill with such a check claims is about a picture that is not
    there: every pair is left out (`needs_image` names the claiming skills) rather than a text skill inventing an
    answer."""

    pairs: tuple[Pair, ...]
    answers: tuple[Answer, ...]
    registry_pairs: tuple[Pair, ...] = ()
    """Every pair of the registry, callable now or not: the cards of the steps already taken."""
    declined: tuple[tuple[str, str], ...] = ()
    """(skill, reason) for each skill of an affordable pair that declined the question: why those pairs are out."""
    accuracy: Mapping[str, float] = field(default_factory=dict)
    """By pair id, how each of the registry's pairs did on the calibration questions most like this one
    (`measured_accuracy`)."""
    needs_image: tuple[str, ...] = ()
    """The request has no image and these skills, which need one, claim the question from its text: no pair is
    offered (the graph ends the episode with an input error naming them)."""

    @classmethod
    def build(cls, registry: Registry, view: EpisodeView) -> ActionSpace:
        every = tuple(registry.pairs())
        affordable = () if view.budget_spent else tuple(p for p in every if p.model.cost.per_call <= view.cost_left)
        skills = {p.skill.name: p.skill for p in affordable}
        reasons = {name: skill.declines(view.question, view.choices) for name, skill in skills.items()}
        pairs = tuple(p for p in affordable if not reasons[p.skill.name])
        needs_image: tuple[str, ...] = ()
        if not view.images:
            needs_image = _claimed_for_an_image(skills.values(), reasons)
            pairs = () if needs_image else tuple(p for p in pairs if not p.skill.needs_image)
        candidates = view.candidates()
        answers = tuple(Answer(c) for c in candidates) if candidates else (Answer(None),)
        declined = tuple(sorted((skill, reason) for skill, reason in reasons.items() if reason))
        accuracy = measured_accuracy(registry, view.question, view.images, view.choices)
        return cls(pairs, answers, every, declined, accuracy, needs_image)

    @property
    def invokes(self) -> tuple[Invoke, ...]:
        return tuple(Invoke(p.model.name, p.skill.name) for p in self.pairs)

    @property
    def actions(self) -> tuple[Action, ...]:
        return self.invokes + self.answers


def _claimed_for_an_image(skills, reasons: Mapping[str, str | None]) -> tuple[str, ...]:
    """The skills that need an image and accept the question by their text check, when no skill that answers from
    text alone accepts it by its own check; else (). A skill without a check claims nothing: only a check that
    can say no says something when it says yes."""
    checked = [s for s in skills if s.declines_func is not None and not reasons[s.name]]
    if any(not s.needs_image for s in checked):
        return ()
    return tuple(sorted(s.name for s in checked))


@dataclass(frozen=True)
class Distribution:
    """A finite distribution over actions; an LM router's output that is no action (`InvalidAction`) is one of them,
    so the graph records it as the policy's mistake."""

    actions: tuple[Action | InvalidAction, ...]
    probs: np.ndarray

    def __post_init__(self) -> None:
        if len(self.actions) != len(self.probs) or not self.actions:
            raise ValueError("a distribution needs one probability per action and at least one action")
        if not np.isclose(self.probs.sum(), 1.0) or (self.probs < 0).any():
            raise ValueError(f"probabilities must be non-negative and sum to 1, got {self.probs}")

    @classmethod
    def certain(cls, action: Action | InvalidAction) -> Distribution:
        return cls((action,), np.ones(1))

    @classmethod
    def uniform(cls, actions: tuple[Action, ...]) -> Distribution:
        return cls(actions, np.full(len(actions), 1.0 / len(actions)))

    def greedy(self) -> Action | InvalidAction:
        return self.actions[int(np.argmax(self.probs))]

    def sample(self, rng: np.random.Generator) -> Action | InvalidAction:
        return self.actions[int(rng.choice(len(self.actions), p=self.probs))]

    def log_prob(self, action: Action | InvalidAction) -> float:
        p = sum(float(q) for a, q in zip(self.actions, self.probs) if a == action)
        return float(np.log(p)) if p > 0 else float("-inf")

    def entropy(self) -> float:
        p = self.probs[self.probs > 0]
        return float(-(p * np.log(p)).sum())


@runtime_checkable
class Policy(Protocol):
    """What the graph, the trainers and the catalog rely on: a `name` (shown in traces), `stochastic` (random by
    definition, like `random`: the graph then samples from it even in a greedy run, whose argmax of a uniform
    distribution would be the first action every time) and `distribution(view, space)` over the actions valid
    now. Every policy of the project declares all three; tests/test_policies_protocol.py checks them."""

    stochastic: bool

    @property
    def name(self) -> str: ...  # read-only here: FixedPolicy derives it from its pair

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution: ...
