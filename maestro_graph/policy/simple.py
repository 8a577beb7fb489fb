"""Policies that need no training: one fixed pair, uniform random, and the ranking routers' shared loop with its
keyword-rules instance."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..registry.pair import Pair
from ..types import Answer, ErrorKind, Invoke, split_pair
from .base import ActionSpace, Distribution, EpisodeView, best_candidate

__all__ = ["FixedPolicy", "RandomPolicy", "RankingPolicy", "RulesPolicy"]

_WORD_RE = re.compile(r"[a-z0-9]+")


def _answer_best(view: EpisodeView) -> Distribution:
    return Distribution.certain(Answer(best_candidate(view.steps)))


@dataclass
class FixedPolicy:
    """Always the same pair, once; then answer with what it returned (or an explicit no-answer)."""

    pair: str
    stochastic: bool = False

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
    stochastic: bool = True

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        return Distribution.uniform(space.actions)


class RankingPolicy:
    """A router that ranks the pairs for the question and calls the best untried one; it answers as soon as a step
    returns a candidate, or when an image it was given is broken (another pair cannot read a corrupt image either).
    A question without an image goes on past a pair that needed one: the pairs that read text may answer it.
    Subclasses only say how to score pairs (higher is better)."""

    name = "ranking"
    stochastic = False

    def pair_scores(self, view: EpisodeView, pairs: list[Pair]) -> list[float]:
        raise NotImplementedError

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        if view.candidates() or (view.images and any(s.error_kind == ErrorKind.INPUT for s in view.steps)):
            return _answer_best(view)
        untried = [p for p in space.pairs if not view.called(p.id)]
        if not untried:
            return _answer_best(view)
        scores = self.pair_scores(view, untried)
        # ties go to the pair known to be more accurate on its family (profile, else the card's reported figure;
        # a known figure beats an unknown one), then to the cheaper model, then to registry order
        known = [-1.0 if p.accuracy is None else p.accuracy for p in untried]
        best = max(range(len(untried)), key=lambda i: (scores[i], known[i], -untried[i].model.cost.per_call, -i))
        return Distribution.certain(Invoke(untried[best].model.name, untried[best].skill.name))


def _keyword_hits(question: str, pair: Pair) -> int:
    """How many of the skill's keywords (SKILL.md `metadata.keywords`) occur in the question."""
    words = " ".join(_WORD_RE.findall(question.lower()))
    return sum(1 for kw in pair.skill.keywords if re.search(rf"\b{re.escape(kw.lower())}\b", words))


class RulesPolicy(RankingPolicy):
    """Keyword rules. Keywords live in the skill cards, so new skills take part without code changes; text-only
    chat skills rank last when there are images and first when there are none."""

    name = "rules"

    def pair_scores(self, view: EpisodeView, pairs: list[Pair]) -> list[float]:
        has_image = bool(view.images)
        return [_keyword_hits(view.question, p) + 0.5 * (has_image != ("chat" in p.skill.requires)) for p in pairs]
