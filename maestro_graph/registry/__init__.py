"""Model cards, skill folders, and the compatible-pair action space."""

from .config import ModelCard, RegistryConfig, load_config
from .context import SkillContext
from .registry import Pair, Registry
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
