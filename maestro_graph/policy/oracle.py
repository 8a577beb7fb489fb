"""The oracle: an upper bound for evaluation only. It is given a judge for one task and tries pairs until one is
right, so its accuracy answers "does any pair get this item right?"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..types import Answer, Invoke
from .base import ActionSpace, Distribution, EpisodeView, best_candidate

__all__ = ["OraclePolicy"]


@dataclass
class OraclePolicy:
    """`judge(candidate) -> bool` holds the answer key; it is built per task by the evaluator, never by a server."""

    judge: Callable[[str], bool]
    name: str = "oracle"
    stochastic: bool = False

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        for candidate in view.candidates():
            if self.judge(candidate):
                return Distribution.certain(Answer(candidate))
        untried = [p for p in space.pairs if not view.called(p.id)]
        if untried and view.turns_left > 0:
            return Distribution.certain(Invoke(untried[0].model.name, untried[0].skill.name))
        return Distribution.certain(Answer(best_candidate(view.steps)))
