"""Card-text paraphrases and registry dropout: training augmentations that make the policy read cards instead of
memorising names, so experts added after training are still routed to."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...registry import Registry

__all__ = ["Augmentations", "RegistryView", "families", "paraphrase", "sample_card_texts", "sample_dropout",
           "sample_unprofiled", "sample_view"]

_PREFIXES = ("", "This expert: ", "Capability card. ", "Use it when needed: ", "Description: ")


def paraphrase(text: str, rng: np.random.Generator) -> str:
    """A variant of a card text: a non-empty random subset of its sentences, in random order, with a prefix."""
    sentences = [s.strip() for s in re.split(r"(?<=[.;])\s+", text.strip()) if s.strip()]
    keep = max(1, int(rng.integers(1, len(sentences) + 1)))
    chosen = [sentences[i] for i in sorted(rng.choice(len(sentences), size=keep, replace=False))]
    if rng.random() < 0.5:
        rng.shuffle(chosen)
    return _PREFIXES[int(rng.integers(len(_PREFIXES)))] + " ".join(chosen)


def _runnable_skills(registry: Registry) -> set[str]:
    """Tier-1 skills some model of the registry can run. The others (a vision-chat skill in a CPU registry) take no
    random draw: hiding or paraphrasing them changes nothing, and the stream stays the one of the registry without
    them."""
    return {pair.skill.name for pair in registry.pairs()}


def sample_card_texts(registry: Registry, rng: np.random.Generator, prob: float) -> dict[str, str]:
    """Paraphrased descriptions for some of the registry's cards (models, and the skills some model can run), keyed
    by name."""
    runnable = _runnable_skills(registry)
    cards = [(m.name, m.card.description) for m in registry.models.values()]
    cards += [(s.name, s.description) for s in registry.skills.values() if s.tier == 1 and s.name in runnable]
    return {name: paraphrase(text, rng) for name, text in cards if rng.random() < prob}


def families(registry: Registry) -> list[tuple[set[str], set[str]]]:
    """The registry's families as (models, tier-1 skills): each model with the skills that need only it (no other
    model can run them), and each skill with the models only it uses. Hiding a family removes a kind of expertise
    whole, as adding one after training brings it whole (the barcode readers with their skill). Each family once."""
    runs = {s.name: {m for m, h in registry.models.items() if registry.compatible(h.card, s)} for s in registry.tier1}
    serves = {m: {s for s, models in runs.items() if m in models} for m in registry.models}
    by_model = [({m}, {s for s in skills if runs[s] == {m}}) for m, skills in serves.items()]
    by_skill = [({m for m in models if serves[m] == {s}}, {s}) for s, models in runs.items()]
    # a family of one model and one skill is found from both sides: keep it once, so it is not drawn twice
    unique = {(frozenset(m), frozenset(s)): (m, s) for m, s in by_model + by_skill}
    return list(unique.values())


def sample_dropout(registry: Registry, rng: np.random.Generator, prob: float,
                   family_prob: float = 0.0) -> tuple[set[str], set[str]]:
    """Models and tier-1 skills to leave out of one group's registry: each model and each skill with probability
    `prob`, and each of the registry's `families` whole with probability `family_prob` (at least one pair always
    remains). With `family_prob` 0 no family is drawn, so the random stream is the one of runs made before it. Only
    skills some model can run are drawn (`_runnable_skills`)."""
    models = {name for name in registry.models if rng.random() < prob}
    runnable = _runnable_skills(registry)
    skills = {s.name for s in registry.tier1 if s.name in runnable and rng.random() < prob}
    if family_prob > 0:
        for family_models, family_skills in families(registry):
            if rng.random() < family_prob:
                models |= family_models
                skills |= family_skills
    if not registry.without(models=models, skills=skills).pairs():
        return set(), set()
    return models, skills


def sample_unprofiled(registry: Registry, rng: np.random.Generator, prob: float) -> set[str]:
    """Profiled pairs whose profile one group's registry hides, each with probability `prob`: the policy also meets
    pairs it knows nothing measured about (a new expert before `maestro registry profile`), so it reads their cards
    rather than leaning on figures that may be missing. No draw when nothing is profiled or `prob` is 0."""
    if prob <= 0:
        return set()
    return {pair for pair in sorted(registry.profiles) if rng.random() < prob}


@dataclass(frozen=True)
class RegistryView:
    """The registry one training group (GRPO) or item (warm start) sees: what dropout hides, the paraphrased card
    texts and the hidden profiles. Plain sets and strings, so a GRPO plan pickles to a Ray worker without the
    registry."""

    drop_models: frozenset[str]
    drop_skills: frozenset[str]
    descriptions: dict[str, str]
    unprofiled: frozenset[str]

    def apply(self, registry: Registry) -> Registry:
        return registry.without(models=self.drop_models, skills=self.drop_skills).without(
            descriptions=self.descriptions, unprofiled=self.unprofiled)


class Augmentations(Protocol):
    """The augmentation settings a training config carries (rl.config.NeuralGRPOConfig's): what `sample_view`
    reads, named here so that the augmentations depend on no config module."""

    registry_dropout: float
    family_dropout: float
    paraphrase_prob: float
    profile_dropout: float


def sample_view(registry: Registry, rng: np.random.Generator, config: Augmentations) -> RegistryView:
    """One draw of every training augmentation, in a fixed order on `rng`, so both trainers sample alike."""
    drop_models, drop_skills = sample_dropout(registry, rng, config.registry_dropout, config.family_dropout)
    dropped = registry.without(models=drop_models, skills=drop_skills)
    descriptions = sample_card_texts(dropped, rng, config.paraphrase_prob)
    unprofiled = sample_unprofiled(dropped, rng, config.profile_dropout)
    return RegistryView(frozenset(drop_models), frozenset(drop_skills), descriptions, frozenset(unprofiled))
