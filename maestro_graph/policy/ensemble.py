"""Several neural checkpoints deciding together: each action's probability is the mean of theirs.

A GRPO run depends on its seed (one recipe scored several points apart across seeds); the mean of several
runs' distributions depends on no one seed, which is the usual cure (an ensemble of independently trained
policies), and picks no seed on evaluation items. Named `neural:A.safetensors+B.safetensors+...` (`make_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import ActionSpace, Distribution, EpisodeView
from .neural import NeuralPolicy

__all__ = ["ENSEMBLE_SEP", "NeuralEnsemble"]

ENSEMBLE_SEP = "+"
"""Between the checkpoints of an ensemble's name (not ",", which separates a served catalog's names)."""


@dataclass
class NeuralEnsemble:
    members: list[NeuralPolicy]
    name: str = "neural"
    stochastic: bool = False

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        """The mean of the members' distributions; an action only some members offer (a member that may give up
        where another may not) counts as probability 0 for the others."""
        total: dict = {}
        for member in self.members:
            dist = member.distribution(view, space)
            for action, p in zip(dist.actions, dist.probs):
                total[action] = total.get(action, 0.0) + float(p)
        probs = np.asarray(list(total.values()))
        return Distribution(tuple(total), probs / probs.sum())
