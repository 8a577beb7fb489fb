"""The neural policies named by their checkpoints: `neural` (the shipped one), `neural:PATH` and `neural:A+B...`
(an ensemble). Light to import (torch loads on the first call), so both `make_policy` and an LM router's ranker
(`order: neural`) build them from here without importing each other."""

from __future__ import annotations

from pathlib import Path

from .base import Policy

__all__ = ["SHIPPED_CHECKPOINT", "load_neural"]

SHIPPED_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "neural.safetensors"
"""The policy trained by the project's own `maestro train` (the recipe: docs/training.md)."""


def load_neural(name: str) -> Policy:
    """The neural policy of a `neural[:PATH[+PATH...]]` name: one checkpoint, or the ensemble of several."""
    from .ensemble import ENSEMBLE_SEP, NeuralEnsemble
    from .neural import NeuralPolicy

    paths = (name.partition(":")[2] or str(SHIPPED_CHECKPOINT)).split(ENSEMBLE_SEP)
    members = [NeuralPolicy.load(path) for path in paths]
    return members[0] if len(members) == 1 else NeuralEnsemble(members)
