"""Model cards, skill folders, and the compatible-pair action space.

Importing the package loads cards, skills and pairs only: `Registry` and `SkillContext`, which hold the expert
handles, load on first use, so a policy that reads pairs (registry.pair) imports no expert."""

from importlib import import_module
from typing import Any

from .config import ModelCard, RegistryConfig, load_config
from .pair import Pair
from .skills import SkillSpec, discover_skills, load_skill

__all__ = [
    "ModelCard",
    "Pair",
    "Registry",
    "RegistryConfig",
    "SkillContext",
    "SkillSpec",
    "discover_skills",
    "load_config",
    "load_skill",
]

_LAZY = {"Registry": ".registry", "SkillContext": ".context"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_LAZY[name], __name__), name)
