"""`maestro calibrate`: a confidence model fitted on the recorded evidence of scored episodes (prediction files
`maestro eval` wrote), and its calibration on other episodes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.calibration import ConfidenceModel, ReliabilityBin, expected_calibration_error, reliability_bins
from ..core.jsonl import read_jsonl
from ..errors import ConfigError

__all__ = ["Judged", "fit_confidence", "judged_answers"]


@dataclass(frozen=True)
class Judged:
    """The answered episodes of prediction files: the evidence each answer rested on and its score."""

    basis: list[dict[str, float]]
    right: list[float]

    def ece(self, model: ConfidenceModel) -> float | None:
        """The expected calibration error (10 bins) of `model`'s confidences on these answers."""
        return expected_calibration_error([model.probability(b) for b in self.basis], self.right)

    def reliability(self, model: ConfidenceModel) -> list[ReliabilityBin]:
        """The reliability diagram's bins of `model`'s confidences on these answers."""
        return reliability_bins([model.probability(b) for b in self.basis], self.right)


def judged_answers(files: list[Path]) -> Judged:
    """Every answered, scored episode of `files` (a ConfigError naming the file and line of one that recorded no
    `confidence_basis` or no `score`: written before confidences were recorded, or by `maestro predict` on items
    without an answer key)."""
    basis, right = [], []
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
            basis.append(record["confidence_basis"])
            right.append(float(record["score"]))
    return Judged(basis, right)


def fit_confidence(files: list[Path]) -> tuple[ConfidenceModel, Judged]:
    """A confidence model fitted on the answers of `files`, and those answers."""
    judged = judged_answers(files)
    if not judged.right:
        raise ConfigError("no answered, scored episode to fit on", file=", ".join(map(str, files)))
    fitted_on = ", ".join(str(f) for f in files)
    return ConfidenceModel.fit(judged.basis, judged.right, fitted_on=fitted_on), judged
