"""How sure an answer is: a logistic model from what an episode knows when it answers (its evidence, named features)
to the probability that the answer is right, fitted on episodes whose answers were scored; and the measures of how
well such probabilities are calibrated (expected calibration error, the reliability diagram's bins).

The model is data: a JSON file of named weights (`ConfidenceModel.save` / `read`), never a pickle, so it ships with
the package and a reader can see what each feature weighs. Features a model does not name are ignored and a feature
it names that an episode lacks counts as 0, so the feature set can grow without breaking shipped files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard, cast

import numpy as np

from ..errors import ConfigError

__all__ = ["CONFIDENCE_FORMAT", "ECE_BINS", "ConfidenceModel", "ReliabilityBin", "expected_calibration_error",
           "reliability_bins"]

CONFIDENCE_FORMAT = "maestro-confidence-1"
ECE_BINS = 10
"""Equal-width confidence bins of the expected calibration error and the reliability diagram."""
_L2 = 3.0
"""Ridge penalty of the fit (a Gaussian prior on the weights, whatever the number of items): keeps weights finite
where a feature separates the fitting items, and weighs little against a few hundred of them. Chosen on the training
half alone, by the source-balanced ECE of a 5-fold split plus the ECE leaving each source out (docs/results.md, "How
sure an answer is")."""


@dataclass(frozen=True)
class ConfidenceModel:
    """P(right) = sigmoid(bias + sum of weight * feature) over named features."""

    weights: dict[str, float]
    bias: float
    fitted_on: str = ""
    """What the model was fitted on (files, items), for the reader of the file."""
    items: int = 0

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(w * float(features.get(name, 0.0)) for name, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))

    @classmethod
    def fit(cls, rows: Sequence[Mapping[str, float]], right: Sequence[float], *, fitted_on: str = "",
            steps: int = 200) -> ConfidenceModel:
        """The ridge-penalised maximum-likelihood fit (Newton steps) of `right` (1 right, 0 wrong, or a partial
        score) on the features of `rows`; every feature that takes more than one value over the rows is a weight
        (one that never varies says nothing the bias does not)."""
        if len(rows) != len(right) or not rows:
            raise ValueError(f"{len(rows)} feature rows and {len(right)} labels: need as many, and at least one")
        names = sorted(n for n in {name for row in rows for name in row}
                       if len({float(row.get(n, 0.0)) for row in rows}) > 1)
        x = np.array([[1.0, *(float(row.get(n, 0.0)) for n in names)] for row in rows])
        y = np.asarray(right, dtype=float)
        w = np.zeros(x.shape[1])
        penalty = _L2 * np.diag([0.0, *([1.0] * len(names))])
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -40, 40)))
            gradient = x.T @ (p - y) + penalty @ w
            hessian = (x * (p * (1 - p))[:, None]).T @ x + penalty + 1e-9 * np.eye(len(w))
            step = np.linalg.solve(hessian, gradient)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        return cls({n: float(v) for n, v in zip(names, w[1:])}, float(w[0]), fitted_on, len(y))

    def save(self, path: str | Path) -> None:
        body = {"format": CONFIDENCE_FORMAT, "fitted_on": self.fitted_on, "items": self.items,
                "bias": round(self.bias, 6), "weights": {n: round(v, 6) for n, v in sorted(self.weights.items())}}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(body, indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> ConfidenceModel:
        """The model in a file `save` wrote; a ConfigError naming the file and the field otherwise."""
        path = Path(path)
        try:
            body = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"not a confidence model ({exc})", file=str(path)) from exc
        if not isinstance(body, dict) or body.get("format") != CONFIDENCE_FORMAT:
            raise ConfigError(f"not a {CONFIDENCE_FORMAT} file", file=str(path), field="format")
        weights, bias = body.get("weights"), body.get("bias")
        if not isinstance(weights, dict) or not all(_is_number(v) for v in weights.values()):
            raise ConfigError("needs `weights`: a number by feature name", file=str(path), field="weights")
        if not _is_number(bias):
            raise ConfigError(f"needs a number, got {bias!r}", file=str(path), field="bias")
        return cls({str(n): float(v) for n, v in weights.items()}, float(bias), str(body.get("fitted_on", "")),
                   int(body.get("items", 0) or 0))


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability diagram: the answers whose confidence fell in [low, high)."""

    low: float
    high: float
    count: int = 0
    confidence: float | None = None
    """Mean confidence of its answers (None: no answer fell in it)."""
    accuracy: float | None = None
    """Share of its answers that were right (None: no answer fell in it)."""


def _binned(confidence: Sequence[float], right: Sequence[float], bins: int,
            weights: Sequence[float] | None) -> list[tuple[ReliabilityBin, float]]:
    """Each equal-width confidence bin (the last one closed at 1) with the total weight of its answers (1 each
    without `weights`); a bin's mean confidence and accuracy weigh its answers so, its count stays their number."""
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(right, dtype=float)
    weight = np.ones_like(conf) if weights is None else np.asarray(weights, dtype=float)
    index = np.minimum((conf * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        out.append((ReliabilityBin(b / bins, (b + 1) / bins, count,
                                   float(np.average(conf[inside], weights=weight[inside])) if count else None,
                                   float(np.average(hit[inside], weights=weight[inside])) if count else None),
                    float(weight[inside].sum())))
    return out


def reliability_bins(confidence: Sequence[float], right: Sequence[float], bins: int = ECE_BINS,
                     weights: Sequence[float] | None = None) -> list[ReliabilityBin]:
    """Answers grouped into `bins` equal-width confidence bins (the last one closed at 1); with `weights`, each bin's
    mean confidence and accuracy weigh its answers so (its count stays the number of answers)."""
    return [found for found, _ in _binned(confidence, right, bins, weights)]


def expected_calibration_error(confidence: Sequence[float], right: Sequence[float], bins: int = ECE_BINS,
                               weights: Sequence[float] | None = None) -> float | None:
    """The mean, over equal-width confidence bins weighted by their answers (or by the answers' `weights`), of
    |accuracy - mean confidence|; None without answers."""
    found = _binned(confidence, right, bins, weights)
    total = sum(mass for _, mass in found)
    if not len(confidence) or total <= 0:
        return None
    # a bin with answers has their accuracy and confidence
    return float(sum(mass * abs(cast(float, b.accuracy) - cast(float, b.confidence)) for b, mass in found if b.count)
                 / total)
