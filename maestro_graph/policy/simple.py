"""Baseline policies that need no training: one fixed pair, uniform random, and keyword rules."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..registry import Pair
from ..types import Answer, Invoke, split_pair
from .base import ActionSpace, Distribution, EpisodeView, best_candidate

__all__ = ["FixedPolicy", "RandomPolicy", "RulesPolicy"]

_WORD_RE = re.compile(r"[a-z0-9]+")


def _answer_best(view: EpisodeView) -> Distribution:
    return Distribution.certain(Answer(best_candidate(view.steps)))


@dataclass
class FixedPolicy:
    """Always the same pair, once; then answer with what it returned (or an explicit no-answer)."""

    pair: str

    def __post_init__(self) -> None:
        split_pair(self.pair)  # a malformed id is the user's error, raised now

    @property
    def name(self) -> str:
        return f"fixed:{self.pair}"

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        if view.called(self.pair):
            return _answer_best(view)
        model, skill = split_pair(self.pair)
        return Distribution.certain(Invoke(model, skill))


@dataclass
class RandomPolicy:
    """Uniform over every valid action (invoking any pair or answering any candidate)."""

    name: str = "random"

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        return Distribution.uniform(space.actions)


def _keyword_hits(question: str, pair: Pair) -> int:
    """How many of the skill's keywords (SKILL.md `metadata.keywords`) occur in the question."""
    words = " ".join(_WORD_RE.findall(question.lower()))
    return sum(1 for kw in pair.skill.keywords if re.search(rf"\b{re.escape(kw.lower())}\b", words))


@dataclass
class RulesPolicy:
    """Keyword rules: the skill whose card keywords best match the question, on its cheapest model; answer as soon
    as a step returns a candidate; on failure try the next best untried pair. Keywords live in the skill cards, so
    new skills take part without code changes."""

    name: str = "rules"

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        # a candidate ends the episode; so does a broken input (another pair cannot read a corrupt image either)
        if view.candidates() or not space.pairs or any(s.error_kind == "input" for s in view.steps):
            return _answer_best(view)
        untried = [p for p in space.pairs if not view.called(p.id)]
        if not untried:
            return _answer_best(view)
        needs_image = bool(view.images)
        # most keyword hits first; then text-only chat skills last when there are images (first when there are none)
        ranked = sorted(
            untried,
            key=lambda p: (-_keyword_hits(view.question, p), needs_image == ("chat" in p.skill.requires), p.model.cost.per_call),
        )
        best = ranked[0]
        return Distribution.certain(Invoke(best.model.name, best.skill.name))
