"""How sure an episode's answer is: what the episode knows when it answers (who gave the answer, how the pairs that
said it did on the calibration questions most like this one, whether the experts agreed, how sure the skills were)
as named features, and the shipped `ConfidenceModel` that turns them into the probability that the answer is right.

The features read only the question, its images and options, the steps and the answer (never a task's answer key,
source or domain), so the same function serves the graph's answer node and every record it writes; `maestro
calibrate` fits a model on those records of scored episodes (docs/evaluation.md, "How sure an answer is").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..answer_forms import expected_form, has_form
from ..core.calibration import ConfidenceModel
from ..policy.base import measured_accuracy
from ..registry import Registry
from ..scoring import normalize_text, score
from ..types import ErrorKind, Step

__all__ = ["GUESS", "SHIPPED_CONFIDENCE", "answer_confidence", "answer_note", "confidence_features",
           "shipped_confidence"]

SHIPPED_CONFIDENCE = Path(__file__).resolve().parent.parent / "checkpoints" / "confidence.json"
"""The confidence model shipped with the package, fitted on the shipped neural policy's episodes of calibration
items (docs/results.md, "How sure an answer is")."""

_EPS = 0.02
"""Measured accuracies are clipped to [_EPS, 1 - _EPS] before their log-odds are taken."""
GUESS = "source_guess"
"""The feature that marks a guess: its confidence is its chance (`answer_confidence`), not the model's."""


@functools.cache
def shipped_confidence() -> ConfidenceModel:
    return ConfidenceModel.read(SHIPPED_CONFIDENCE)


def answer_confidence(model: ConfidenceModel, features: Mapping[str, float]) -> float:
    """The probability that an answer with these features is right: the model's, but a guess (an option no expert
    named, drawn among those the evidence leaves tied) is as sure as a blind pick, one in as many options: a draw is
    right that often whatever else the features say, and a fit on the few guesses a calibration set holds (nine on
    the training half, one of them right) estimates it worse."""
    if features.get(GUESS):
        return float(features.get("chance", 0.0))
    return model.probability(features)


def _logit(p: float) -> float:
    p = min(1 - _EPS, max(_EPS, p))
    return math.log(p / (1 - p))


def _agrees(said: str | None, answer: str, kind: str, choices: Sequence[str] | None) -> bool:
    """Whether a step's answer says what the episode answered (an option by letter or text, a number within
    scoring's tolerance, the same yes/no or normalised text)."""
    return score(said, answer, kind, choices=list(choices) if choices else None) >= 1.0


def confidence_features(registry: Registry, question: str, images: Sequence[str], choices: Sequence[str] | None,
                        steps: Sequence[Step], answer: str | None, source: str | None) -> dict[str, float]:
    """The evidence an answer rests on, as the confidence model's named features (empty without an answer):

    - who gave it (`source_candidate`, `source_guess`; the policy is the baseline) and the form the question asks
      for (`form_choice`, `form_yesno`, `form_number`; free text is the baseline), the chance of a blind pick
      among its options or yes/no (`chance`) and the answer's length in words (`answer_length`, log-scaled);
    - the log-odds of the best measured accuracy, on the calibration questions most like this one, of a pair whose
      step said the answer (`support_accuracy`; `support_unmeasured` when none of them was measured), and the
      registry's reach (`reach`: whether any pair answered such questions; `reach_unknown` when it cannot say);
    - the steps: how many said the answer (`support`), how many answered something else (`against`), how sure the
      most confident of the supporting skills was (`skill_confidence`, also as log-odds, `skill_logit`, and times
      `support_accuracy`, `skill_support`: a skill's own certainty means more where its pair is measured to be
      right) and how many calls ran (`calls`);
    - whether the answer fits the question (`number_for_text`: a bare number where the question asks for a name or
      a phrase, as a chart reader's value for "which curve ..."): where a kind of question was never calibrated,
      this still shows the answer missed."""
    if answer is None:
        return {}
    form = expected_form(question, choices)
    kind = {"choice": "choice", "yesno": "yesno", "number": "number"}.get(form, "text")
    ran = [s for s in steps if s.error_kind != ErrorKind.POLICY]
    said = [s for s in ran if not s.error and s.answer is not None]
    support = [s for s in said if _agrees(s.answer, answer, kind, choices)]
    chance = 1 / len(choices) if form == "choice" and choices else 0.5 if form == "yesno" else 0.0
    accuracy = measured_accuracy(registry, question, images, choices)
    measured = [accuracy[s.pair] for s in support if s.pair in accuracy]
    reach = (registry.reach.estimate(question, images, choices, [p for p in registry.reach.pairs if p in accuracy])
             if registry.reach is not None and accuracy else None)
    features = {
        "source_candidate": float(source == "candidate"),
        GUESS: float(source == "guess"),
        "form_choice": float(form == "choice"),
        "form_yesno": float(form == "yesno"),
        "form_number": float(form == "number"),
        "chance": chance,
        "answer_length": math.log1p(len(normalize_text(answer).split())) / 3,
        "support_accuracy": _logit(max(measured)) if measured else 0.0,
        "support_unmeasured": float(bool(support) and not measured),
        "reach": _logit(reach) if reach is not None else 0.0,
        "reach_unknown": float(reach is None),
        "support": float(min(len(support), 3)),
        "against": float(min(len(said) - len(support), 3)),
        "skill_confidence": max((s.confidence for s in support), default=0.0),
        "calls": float(min(len(ran), 4)),
        "number_for_text": float(form == "text" and has_form(answer, "number", choices)),
    }
    sure = features["skill_confidence"]
    features["skill_logit"] = _logit(sure)
    features["skill_support"] = sure * features["support_accuracy"]
    return {name: round(value, 6) for name, value in features.items()}


def answer_note(source: str | None, confidence: float | None, *, asked: bool) -> str:
    """How an answer came about, for a reader of the answer: who gave it (`asked`: whether any expert was called)
    and how sure it is ("guess: no expert answered in the form the question asks for; confidence 0.50")."""
    parts = []
    if source == "guess":
        why = "no expert answered in the form the question asks for" if asked else "no expert was asked"
        parts.append(f"guess: {why}")
    elif source == "candidate":
        parts.append("candidate: an expert's answer the policy did not give")
    if confidence is not None:
        parts.append(f"confidence {confidence:.2f}")
    return "; ".join(parts)
