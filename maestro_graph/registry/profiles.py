"""Expert profiles: how each pair did when it was run once on a small labelled calibration file (`maestro registry
profile`), stored in one JSON file per registry (the registry file's `profile:` key) and read by policies as
`Pair.profile`. No policy weights change when an expert is profiled.

A profile is only as good as the experts it measured, so every entry carries the fingerprint of its pair (what its
outcomes depend on: the model's name, version, capabilities and what its backend runs or is sent, the served model's
id for an endpoint; the skill's name, version and code hash, or its instructions and the vision-chat procedure)
and the file carries the fingerprint of the whole registry. Where a model is served (its URLs, port, key, headers)
and how calls are limited (timeout, concurrency, retries) are not part of it: moving an endpoint keeps its profile.
A pair whose calls failed too often while profiling (the endpoint down) is listed as unmeasured, not as a pair that
answers nothing. On loading, an entry whose pair is gone or has another fingerprint (a new model
version, changed skill code) is ignored with a warning naming it; a file none of whose entries fit belongs to
another registry and is ignored with a warning naming the file. Adding an expert leaves the other pairs' entries
valid: the new pairs have no profile (unknown) until profiled.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..digests import cache_key
from ..errors import ConfigError, first_validation_problem
from ..types import pair_id
from .config import ModelCard
from .skills import SkillSpec
from .vision import procedure_hash

__all__ = ["PROFILE_VERSION", "PairCards", "PairProfile", "ProfileFile", "UnmeasuredPair", "WHERE_SERVED",
           "pair_fingerprint", "pair_fingerprints", "profile_entry", "read_profile", "registry_fingerprint"]

PROFILE_VERSION: Final = 1

WHERE_SERVED = frozenset({"base_url", "base_urls", "api_key_env", "headers"})
"""Backend fields that say where and with which credentials a model is reached, not what answers: left out of the
pair's fingerprint."""

PairCards = dict[str, tuple[ModelCard, SkillSpec]]
"""A registry's pairs as profiles see them: (model card, skill) by pair id."""


class PairProfile(BaseModel):
    """One pair's measured outcome on a calibration file. Its family is the pair's skill (what a task family is
    everywhere in Maestro: never a task's source, domain or meta)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair: str
    fingerprint: str
    family: str
    items: int = Field(ge=1)
    accuracy: float = Field(ge=0, le=1, description="mean score over every calibration item")
    mean_cost: float = Field(ge=0)
    family_items: int = Field(0, ge=0, description="calibration items that some pair of the family got right")
    family_accuracy: float | None = Field(
        None, ge=0, le=1, description="mean score over the family_items: how often the pair is right where its "
        "family can be (None: no such item, or a profile written before it was measured)")
    failures: int = Field(0, ge=0, description="calibration items left out because the pair's call failed there "
                          "(the endpoint down, an HTTP error, a timeout): not counted as wrong")


class UnmeasuredPair(BaseModel):
    """A pair whose calls failed on too many calibration items to say how it does: no accuracy is written for it,
    so no policy reads an endpoint's outage as the model's inaccuracy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair: str
    fingerprint: str
    reason: str = Field(description="how many calls failed, and the first failure")

    @classmethod
    def of(cls, card: ModelCard, skill: SkillSpec, *, reason: str) -> UnmeasuredPair:
        return cls(pair=pair_id(card.name, skill.name), fingerprint=pair_fingerprint(card, skill), reason=reason)


class ProfileFile(BaseModel):
    """The JSON file `maestro registry profile` writes."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = PROFILE_VERSION
    registry: str = Field(description="registry_fingerprint of the registry that was profiled")
    calibration: str = Field(description="the calibration task file, as given")
    pairs: list[PairProfile]
    unmeasured: list[UnmeasuredPair] = Field(default_factory=list, description="pairs profiled without a result: "
                                             "their calls failed (`maestro registry profile` exits non-zero)")

    def save(self, path: str | Path) -> None:
        """Write the file `read_profile` reads (`maestro registry profile`, and experiments' own profiles)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")


def pair_fingerprint(card: ModelCard, skill: SkillSpec) -> str:
    """What a pair's measured outcome depends on: not the card's description or cost, which a profile outlives; the
    code it runs (the skill's, or the vision-chat procedure with the skill's instructions); not where the model is
    served (WHERE_SERVED) nor the card's timeout, concurrency and retries."""
    model = card.model_dump(mode="json", include={"name", "version", "capabilities", "backend"})
    model["backend"] = {k: v for k, v in model["backend"].items() if k not in WHERE_SERVED}
    return cache_key("pair", model, skill.name, skill.version, procedure_hash(card, skill))[:16]


def pair_fingerprints(pairs: PairCards) -> dict[str, str]:
    """Each pair's fingerprint, by pair id."""
    return {pid: pair_fingerprint(card, skill) for pid, (card, skill) in pairs.items()}


def registry_fingerprint(fingerprints: dict[str, str]) -> str:
    """The fingerprint of a registry: of its pairs' fingerprints."""
    return cache_key("registry", sorted(fingerprints.items()))[:16]


def read_profile(path: str | Path, pairs: PairCards) -> dict[str, PairProfile]:
    """The entries of a profile file that fit these pairs, by pair id; a file that is missing or malformed is a
    ConfigError naming it (the operator referenced it), entries that do not fit are warned about and ignored."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such profile file; run `maestro registry profile` to write it", file=str(path))
    try:
        profile = ProfileFile.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}", file=str(path)) from exc
    except ValidationError as exc:
        field, message = first_validation_problem(exc)
        raise ConfigError(message, file=str(path), field=field) from exc
    current = pair_fingerprints(pairs)
    fits = {e.pair: e for e in profile.pairs if current.get(e.pair) == e.fingerprint}
    if not fits and profile.pairs:
        warnings.warn(f"profile {path} belongs to another registry (fingerprint {profile.registry}, this registry's "
                      f"{registry_fingerprint(current)}): ignored; run `maestro registry profile` again", stacklevel=2)
        return {}
    for entry in profile.pairs:
        if entry.pair not in fits:
            why = "not in this registry" if entry.pair not in current else "another model version or skill code"
            warnings.warn(f"profile {path}: entry {entry.pair} ignored ({why}); profile the registry again",
                          stacklevel=2)
    return fits


def profile_entry(card: ModelCard, skill: SkillSpec, scores: list[float], costs: list[float],
                  family_answers: list[bool], failures: int = 0) -> PairProfile:
    """A pair's entry from its scores and costs on the calibration items, and whether some pair of its family got
    each item right. The family accuracy is the figure a router compares: on a calibration file of mixed kinds the
    overall accuracy mostly says how many items were of the family's kind, not how good the pair is at them."""
    family = [score for score, answered in zip(scores, family_answers) if answered]
    return PairProfile(pair=pair_id(card.name, skill.name), fingerprint=pair_fingerprint(card, skill),
                       family=skill.name, items=len(scores), accuracy=sum(scores) / len(scores),
                       mean_cost=sum(costs) / len(costs), family_items=len(family),
                       family_accuracy=sum(family) / len(family) if family else None, failures=failures)
