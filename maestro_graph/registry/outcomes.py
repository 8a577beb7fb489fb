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

from ..errors import ExpertFailure
from ..types import ErrorKind, Step, split_pair
from .profiles import ProfileFile, UnmeasuredPair, pair_fingerprints, profile_entry, registry_fingerprint
from .reach import Reach, reach_path

if TYPE_CHECKING:  # the table is read by policies, which import no expert
    from .registry import Registry

__all__ = ["MAX_FAILED_SHARE", "PairOutcomes", "SourceSummary", "failed_step"]

MAX_FAILED_SHARE = 0.1
"""Above this share of failed calls a pair is not measured: its few answers say more about the endpoint than about
the model. At or below it, the pair is measured on the items whose call did not fail."""
_NOT_FAILURES = frozenset({ExpertFailure.REJECTED})
"""Expert errors that are outcomes of the input, not failures of the call (a calculator that cannot parse an
expression): counted as no answer, like any wrong answer."""


def failed_step(step: Step) -> str | None:
    """Why a measured step's call failed (its kind and message), or None when the step is an outcome: an answer, no
    answer, or an error of the input, the skill or a rejected input. A step with no expert call behind its error
    (refused before sending by the card's own limits) is an outcome too; a pair refused as unavailable (its breaker
    opened after failures in a row) is a failure."""
    if step.error_kind == ErrorKind.POLICY:  # every measured pair was valid: it became unavailable
        return f"{ExpertFailure.UNAVAILABLE}: {step.error.split('; valid pairs')[0] if step.error else ''}"
    if step.error_kind != ErrorKind.EXPERT or not step.calls:
        return None
    failure = step.calls[-1].get("failure")
    if failure is None or failure in _NOT_FAILURES:
        return None
    return f"{failure}: {step.error}"


@dataclass
class SourceSummary:
    """How the pairs do on one source: the best single pair, and whether any pair gets an item right."""

    source: str
    items: int
    best_pair: str
    best_accuracy: float
    oracle_accuracy: float


def _breaker_refusal(failure: str) -> bool:
    """A call refused by the model's open breaker (`failed_step`'s text): it says nothing of what opened it."""
    return failure.startswith(f"{ExpertFailure.BREAKER_OPEN}:") or "circuit breaker open" in failure


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
    failures: list[list[str | None]] | None = None
    """failures[i][j]: why pair j's call on item i failed (`failed_step`), None where it did not (no list: none
    failed); a failed cell's score is not a measurement."""

    def failed(self) -> np.ndarray:
        """(items, pairs) True where the call failed."""
        if self.failures is None:
            return np.zeros(self.scores.shape, dtype=bool)
        return np.asarray([[why is not None for why in row] for row in self.failures], dtype=bool).reshape(
            self.scores.shape)

    def unmeasured(self) -> dict[str, str]:
        """The pairs whose calls failed on more than MAX_FAILED_SHARE of the items, each with how many and the
        first failure: not measured, so no profile entry and no reach outcome is written for them."""
        failed = self.failed()
        found = {}
        for j, pair in enumerate(self.pairs):
            rows = np.flatnonzero(failed[:, j])
            if len(rows) > MAX_FAILED_SHARE * len(self.task_ids):
                why = [self.failures[i][j] or "" for i in rows] if self.failures else [""]
                # a breaker refusing calls says nothing new: the failure that opened it is the reason
                first = next((w for w in why if not _breaker_refusal(w)), why[0])
                found[pair] = f"{len(rows)} of {len(self.task_ids)} calls failed, first: {first}"
        return found

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
        """Per source, the best measured pair and what any measured pair reaches; none for a source where no pair
        was measured (a failed call's 0 is not a measurement)."""
        unmeasured = self.unmeasured()
        measured = [j for j, pair in enumerate(self.pairs) if pair not in unmeasured]
        rows = []
        for source, idx in self._source_rows().items():
            if not measured:
                continue
            scores = self.scores[np.ix_(idx, measured)]
            acc = scores.mean(axis=0)
            best = int(np.argmax(acc))
            rows.append(SourceSummary(source, len(idx), self.pairs[measured[best]], float(acc[best]),
                                      float(scores.max(axis=1).mean())))
        return rows

    def best_single(self) -> str:
        return self.pairs[int(np.argmax(self.macro_accuracy()))]

    def profile(self, registry: Registry, calibration: str) -> ProfileFile:
        """The registry's profile from these outcomes (measured on a calibration file): one entry per measured pair
        with its accuracy, its accuracy where its family (its skill) can answer, and its mean cost, on the items
        whose call did not fail, fingerprinted against the registry (registry.profiles); the pairs whose calls
        failed too often are listed as unmeasured instead."""
        cards = registry.pair_cards()
        skills = [split_pair(pair)[1] for pair in self.pairs]
        failed, unmeasured = self.failed(), self.unmeasured()
        right = (self.scores >= 0.5) & ~failed
        family_answers = {k: right[:, [j for j, s in enumerate(skills) if s == k]].any(axis=1) for k in set(skills)}
        entries = []
        for j, pair in enumerate(self.pairs):
            kept = np.flatnonzero(~failed[:, j])
            if pair in unmeasured or not len(kept):
                continue
            entries.append(profile_entry(*cards[pair], self.scores[kept, j].tolist(), self.costs[kept, j].tolist(),
                                         family_answers[skills[j]][kept].tolist(), failures=int(failed[:, j].sum())))
        missing = [UnmeasuredPair.of(*cards[pair], reason=why) for pair, why in unmeasured.items()]
        return ProfileFile(registry=registry_fingerprint(pair_fingerprints(cards)), calibration=calibration,
                           pairs=entries, unmeasured=missing)

    def reach(self, registry: Registry) -> Reach:
        """Which pair got which of these items right, beside each item's question features (registry.reach): NaN
        (not measured) where the call failed, and for every item of an unmeasured pair."""
        fingerprints = pair_fingerprints(registry.pair_cards())
        right = (self.scores >= 0.5).astype(np.float32)
        right[self.failed()] = np.nan
        for pair in self.unmeasured():
            right[:, self.pairs.index(pair)] = np.nan
        return Reach.measure(self.questions, self.images, self.choices, right,
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
        data["failures"] = self.failures
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> PairOutcomes:
        data = json.loads(Path(path).read_text())
        return cls(**{**data, "scores": np.asarray(data["scores"]), "costs": np.asarray(data["costs"])})
