"""`maestro calibrate`: a confidence model fitted on the recorded evidence of scored episodes (prediction files
`maestro eval` wrote), and its calibration on other episodes: over all of their answers, with each source weighing
alike (so the plentiful, easy sources do not carry the figure), and leaving each source out of the fit in turn (how
it holds on a kind of question it never saw)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.calibration import ConfidenceModel, ReliabilityBin, expected_calibration_error, reliability_bins
from ...core.jsonl import read_jsonl
from ...episode.confidence import GUESS, answer_confidence
from ...errors import ConfigError

__all__ = ["BIN_MIN_ANSWERS", "Fold", "Judged", "chance_worst_gap", "fit_confidence", "judged_answers",
           "leave_one_source_out", "worst_gap"]

BIN_MIN_ANSWERS = 10
"""A reliability bin with at least this many answers counts in `worst_gap` (fewer: one answer moves it by 0.1+)."""
CHANCE_DRAWS = 1000
"""Outcome draws behind `chance_worst_gap`: its percentiles move by about 0.005 from one seed to another."""


@dataclass(frozen=True)
class Judged:
    """The answered episodes of prediction files: the evidence each answer rested on and its score."""

    basis: list[dict[str, float]]
    right: list[float]
    sources: list[str]

    @classmethod
    def of(cls, records: Iterable[dict]) -> Judged:
        """The answered episodes of prediction records (`maestro eval`'s, or `PolicyResult.records`)."""
        answered = [r for r in records if r.get("answer") is not None]
        return cls([r["confidence_basis"] for r in answered], [float(r["score"]) for r in answered],
                   [str(r.get("source") or "unknown") for r in answered])

    def _weights(self, balanced: bool) -> list[float] | None:
        """Each answer's weight: 1, or, `balanced`, 1/(its source's answers), so that every source weighs alike."""
        if not balanced:
            return None
        counts = Counter(self.sources)
        return [1.0 / counts[s] for s in self.sources]

    def ece(self, model: ConfidenceModel, *, balanced: bool = False) -> float | None:
        """The expected calibration error (10 bins) of `model`'s confidences on these answers (`balanced`: each
        source weighing alike)."""
        return expected_calibration_error(self.confidences(model), self.right,
                                          weights=self._weights(balanced))

    def reliability(self, model: ConfidenceModel, *, balanced: bool = False) -> list[ReliabilityBin]:
        """The reliability diagram's bins of `model`'s confidences on these answers."""
        return reliability_bins(self.confidences(model), self.right,
                                weights=self._weights(balanced))

    def chance_gap(self, model: ConfidenceModel) -> tuple[float, float]:
        """`chance_worst_gap` of `model`'s confidences on these answers."""
        return chance_worst_gap(self.confidences(model))

    def confidences(self, model: ConfidenceModel) -> list[float]:
        """The confidence each answer gets from `model` (`answer_confidence`: a guess's is its chance)."""
        return [answer_confidence(model, b) for b in self.basis]

    def fit(self, fitted_on: str) -> ConfidenceModel:
        """A model fitted on the answers that are not guesses (a guess's confidence is its chance)."""
        rows = [i for i, b in enumerate(self.basis) if not b.get(GUESS)]
        if not rows:
            raise ConfigError(f"no answer but guesses to fit on ({fitted_on})")
        return ConfidenceModel.fit([self.basis[i] for i in rows], [self.right[i] for i in rows], fitted_on=fitted_on)

    def only(self, sources: set[str], *, leave_out: bool = False) -> Judged:
        """The answers of `sources` (`leave_out`: of every other source)."""
        rows = [i for i, s in enumerate(self.sources) if (s in sources) != leave_out]
        return Judged([self.basis[i] for i in rows], [self.right[i] for i in rows], [self.sources[i] for i in rows])


def worst_gap(bins: list[ReliabilityBin]) -> float | None:
    """The largest |accuracy - mean confidence| of a bin with at least BIN_MIN_ANSWERS answers (None: no such bin)."""
    gaps = [abs(b.accuracy - b.confidence) for b in bins
            if b.count >= BIN_MIN_ANSWERS and b.accuracy is not None and b.confidence is not None]
    return max(gaps) if gaps else None


def chance_worst_gap(confidence: Sequence[float], draws: int = CHANCE_DRAWS, seed: int = 0) -> tuple[float, float]:
    """The worst bin gap (median, 90th percentile) that a perfectly calibrated model shows on answers given these
    confidences, their outcomes drawn as Bernoulli(confidence): what sampling alone does to a bin of a few dozen
    answers, against which a measured gap (and any bound set on it) reads."""
    rng = np.random.default_rng(seed)
    said = list(confidence)
    gaps = sorted(worst_gap(reliability_bins(said, (rng.random(len(said)) < said).astype(float).tolist())) or 0.0
                  for _ in range(draws))
    return gaps[len(gaps) // 2], gaps[int(0.9 * len(gaps))]


@dataclass(frozen=True)
class Fold:
    """One source left out: the model fitted on every other source's answers, measured on this source's."""

    source: str
    answers: int
    accuracy: float
    confidence: float
    """The mean confidence the model gave this source's answers."""
    ece: float | None
    worst_gap: float | None
    reliability: list[ReliabilityBin]


def leave_one_source_out(judged: Judged) -> tuple[list[Fold], Fold]:
    """Each source's fold (the model fitted on the others), and all folds' answers pooled (each answer with the
    confidence of the model that never saw its source; `source` is "all")."""
    folds, confidence, right = [], [], []
    for source in sorted(set(judged.sources)):
        rest, held = judged.only({source}, leave_out=True), judged.only({source})
        if not rest.right:
            raise ConfigError(f"only one source ({source}) in the answers: leaving it out leaves nothing to fit on")
        said = held.confidences(rest.fit(f"every source but {source}"))
        confidence += said
        right += held.right
        folds.append(_fold(source, said, held.right))
    return folds, _fold("all", confidence, right)


def _fold(source: str, confidence: list[float], right: list[float]) -> Fold:
    bins = reliability_bins(confidence, right)
    return Fold(source, len(right), sum(right) / max(1, len(right)), sum(confidence) / max(1, len(confidence)),
                expected_calibration_error(confidence, right), worst_gap(bins), bins)


def judged_answers(files: list[Path]) -> Judged:
    """Every answered, scored episode of `files` (a ConfigError naming the file and line of one that recorded no
    `confidence_basis` or no `score`: written before confidences were recorded, or by `maestro predict` on items
    without an answer key)."""
    records = []
    for path in files:
        for line in read_jsonl(path):
            record = line.value
            if line.problem or not isinstance(record, dict):
                raise ConfigError(f"line {line.number}: {line.problem or 'not a prediction record'}", file=str(path))
            if record.get("answer") is None:
                continue
            for key in ("confidence_basis", "score"):
                if record.get(key) is None:
                    raise ConfigError(f"line {line.number} ({record.get('id')}) has an answer but no `{key}`; "
                                      "evaluate again with `maestro eval` at this version", file=str(path), field=key)
            records.append(record)
    return Judged.of(records)


def fit_confidence(files: list[Path]) -> tuple[ConfidenceModel, Judged]:
    """A confidence model fitted on the answers of `files`, and those answers."""
    judged = judged_answers(files)
    if not judged.right:
        raise ConfigError("no answered, scored episode to fit on", file=", ".join(map(str, files)))
    return judged.fit(", ".join(str(f) for f in files)), judged
