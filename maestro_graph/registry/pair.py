"""An action of the action space, as policies see it: the card, the skill and what was measured of the pair. Below
the registry's expert handles, so a policy that reads pairs imports no expert."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import pair_id
from .config import ModelCard
from .profiles import PairProfile
from .skills import SkillSpec

__all__ = ["Pair"]


@dataclass(frozen=True)
class Pair:
    """One action of the action space: a tier-1 skill run on a model that has what it needs."""

    model: ModelCard
    skill: SkillSpec
    profile: PairProfile | None = None
    """How the pair did on the registry's calibration file (`maestro registry profile`); None: never profiled."""

    @property
    def id(self) -> str:
        return pair_id(self.model.name, self.skill.name)

    @property
    def accuracy(self) -> float | None:
        """What is known of the pair's accuracy on its family's items: its profile, measured here (its overall
        accuracy where no calibration item was of the family's kind, or the profile predates family figures), else
        the card's reported figure for the skill (`evaluations`), else None (unknown). The neural policy reads it as
        a feature of the pair."""
        if self.profile is not None:
            family = self.profile.family_accuracy
            return self.profile.accuracy if family is None else family
        return self.model.reported_accuracy(self.skill.name)
