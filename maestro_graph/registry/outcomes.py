"""Which pair gets which training item right: the table that supervises the `best-single`, `knn` and `classifier`
routers and from which a registry's profile and reach are written. Policies read it as data; measuring it (running
every pair on every item) is batch work (maestro_graph.batch.measure), so no policy reaches an expert through it."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..types import split_pair
from .profiles import ProfileFile, pair_fingerprints, profile_entry, registry_fingerprint
from .reach import Reach, reach_path

if TYPE_CHECKING:  # the table is read by policies, which import no expert
    from .registry import Registry

__all__ = ["PairOutcomes", "SourceSummary"]


@dataclass
class SourceSummary:
    """How the pairs do on one source: the best single pair, and whether any pair gets an item right."""

    source: str
    items: int
    best_pair: str
    best_accuracy: float
    oracle_accuracy: float


@dataclass
class PairOutcomes:
    """scores[i, j]: score of pair j on training item i; costs likewise."""

    task_ids: list[str]
    questions: list[str]
    images: list[list[str]]
    choices: list[list[str] | None]
    sources: list[str]
    pairs: list[str]
    scores: np.ndarray
    costs: np.ndarray

    def _source_rows(self) -> dict[str, list[int]]:
        """Row indices of each source's items, sources sorted."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, src in enumerate(self.sources):
            groups[src].append(i)
        return dict(sorted(groups.items()))

    def macro_accuracy(self) -> np.ndarray:
        """Per pair: mean over sources of the accuracy within each source (the paper's macro average)."""
        return np.mean([self.scores[idx].mean(axis=0) for idx in self._source_rows().values()], axis=0)

    def by_source(self) -> list[SourceSummary]:
        rows = []
        for source, idx in self._source_rows().items():
            acc = self.scores[idx].mean(axis=0)
            best = int(np.argmax(acc))
            rows.append(SourceSummary(source, len(idx), self.pairs[best], float(acc[best]),
                                      float(self.scores[idx].max(axis=1).mean())))
        return rows

    def best_single(self) -> str:
        return self.pairs[int(np.argmax(self.macro_accuracy()))]

    def profile(self, registry: Registry, calibration: str) -> ProfileFile:
        """The registry's profile from these outcomes (measured on a calibration file): one entry per pair with
        its accuracy, its accuracy where its family (its skill) can answer, and its mean cost, fingerprinted against
        the registry (registry.profiles)."""
        cards = registry.pair_cards()
        skills = [split_pair(pair)[1] for pair in self.pairs]
        right = self.scores >= 0.5
        family_answers = {k: right[:, [j for j, s in enumerate(skills) if s == k]].any(axis=1) for k in set(skills)}
        entries = [profile_entry(*cards[pair], self.scores[:, j].tolist(), self.costs[:, j].tolist(),
                                 family_answers[skills[j]].tolist())
                   for j, pair in enumerate(self.pairs)] if self.task_ids else []
        return ProfileFile(registry=registry_fingerprint(pair_fingerprints(cards)), calibration=calibration,
                           pairs=entries)

    def reach(self, registry: Registry) -> Reach:
        """Which pair got which of these items right, beside each item's question features (registry.reach)."""
        fingerprints = pair_fingerprints(registry.pair_cards())
        return Reach.measure(self.questions, self.images, self.choices, self.scores >= 0.5,
                             {pair: fingerprints[pair] for pair in self.pairs})

    def write_profile(self, registry: Registry, calibration: str, path: str | Path) -> tuple[ProfileFile, Reach]:
        """The profile file at `path` and its reach beside it (`reach_path`): what `maestro registry profile` and
        the experiments write."""
        profile, reach = self.profile(registry, calibration), self.reach(registry)
        profile.save(path)
        reach.save(reach_path(path))
        return profile, reach

    def save(self, path: str | Path) -> None:
        data = {k: getattr(self, k) for k in ("task_ids", "questions", "images", "choices", "sources", "pairs")}
        data["scores"] = self.scores.tolist()
        data["costs"] = self.costs.tolist()
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> "PairOutcomes":
        data = json.loads(Path(path).read_text())
        return cls(**{**data, "scores": np.asarray(data["scores"]), "costs": np.asarray(data["costs"])})
