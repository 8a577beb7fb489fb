"""Card-text paraphrases and registry dropout: training augmentations that make the policy read cards instead of
memorising names, so experts added after training are still routed to."""

from __future__ import annotations

import re

import numpy as np

from ..registry import Registry

__all__ = ["paraphrase", "sample_card_texts", "sample_dropout"]

_PREFIXES = ("", "This expert: ", "Capability card. ", "Use it when needed: ", "Description: ")


def paraphrase(text: str, rng: np.random.Generator) -> str:
    """A variant of a card text: a non-empty random subset of its sentences, in random order, with a prefix."""
    sentences = [s.strip() for s in re.split(r"(?<=[.;])\s+", text.strip()) if s.strip()]
    keep = max(1, int(rng.integers(1, len(sentences) + 1)))
    chosen = [sentences[i] for i in sorted(rng.choice(len(sentences), size=keep, replace=False))]
    if rng.random() < 0.5:
        rng.shuffle(chosen)
    return _PREFIXES[int(rng.integers(len(_PREFIXES)))] + " ".join(chosen)


def sample_card_texts(registry: Registry, rng: np.random.Generator, prob: float) -> dict[str, str]:
    """Paraphrased descriptions for some of the registry's cards (skills and models), keyed by name."""
    cards = [(m.name, m.card.description) for m in registry.models.values()]
    cards += [(s.name, s.description) for s in registry.skills.values() if s.tier == 1]
    return {name: paraphrase(text, rng) for name, text in cards if rng.random() < prob}


def sample_dropout(registry: Registry, rng: np.random.Generator, prob: float) -> tuple[set[str], set[str]]:
    """Models and tier-1 skills to leave out of one group's registry (at least one pair always remains)."""
    models = {name for name in registry.models if rng.random() < prob}
    skills = {s.name for s in registry.tier1 if rng.random() < prob}
    if not registry.without(models=models, skills=skills).pairs():
        return set(), set()
    return models, skills
