"""Policies: the protocol, the baselines, and `make_policy` that resolves a policy name."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import ActionSpace, Distribution, EpisodeView, Policy, best_candidate
from .catalog import DEFAULT_POLICY, SERVED_POLICIES, PolicyCatalog, PolicyNotOffered
from .oracle import OraclePolicy
from .simple import FixedPolicy, RandomPolicy, RankingPolicy, RulesPolicy

if TYPE_CHECKING:
    from ..registry.outcomes import PairOutcomes

__all__ = [
    "ActionSpace",
    "Distribution",
    "EpisodeView",
    "FixedPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyCatalog",
    "PolicyNotOffered",
    "SERVED_POLICIES",
    "RandomPolicy",
    "RankingPolicy",
    "RulesPolicy",
    "best_candidate",
    "make_policy",
    "POLICY_NAMES",
    "TRAINED_POLICIES",
    "DEFAULT_POLICY",
    "SHIPPED_CHECKPOINT",
]

TRAINED_POLICIES = ("best-single", "knn", "classifier")
POLICY_NAMES = ("neural", "neural:CHECKPOINT", "neural:CHECKPOINT+CHECKPOINT...", "rules", "random",
                "fixed:MODEL@@SKILL", *TRAINED_POLICIES, "oracle", "lm:shipped", "lm:transformers",
                "lm:openai:BASE_URL|MODEL", "lm:FILE.yaml")
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "neural.safetensors"
"""The policy trained by the project's own `maestro train` (the recipe: docs/training.md)."""


def make_policy(name: str, *, outcomes: "PairOutcomes | None" = None) -> Policy:
    """A policy by name. Trained routers need the pair outcomes of a training file; `oracle` is refused here
    because it needs a per-task judge (see OraclePolicy)."""
    if name == "neural" or name.startswith("neural:"):
        from .ensemble import ENSEMBLE_SEP, NeuralEnsemble
        from .neural import NeuralPolicy

        paths = (name.partition(":")[2] or str(SHIPPED_CHECKPOINT)).split(ENSEMBLE_SEP)
        members = [NeuralPolicy.load(path) for path in paths]
        return members[0] if len(members) == 1 else NeuralEnsemble(members)
    if name == "rules":
        return RulesPolicy()
    if name == "random":
        return RandomPolicy()
    if name.startswith("fixed:"):
        try:
            return FixedPolicy(name.removeprefix("fixed:"))
        except ValueError as exc:
            raise ConfigError(f"{exc}; write fixed:MODEL@@SKILL, e.g. fixed:rapidocr@@chart-qa", field="policy") from exc
    if name in TRAINED_POLICIES:
        if outcomes is None:
            raise ConfigError(f"policy {name!r} is trained on a task file: pass --train-tasks FILE", field="policy")
        from .routers import BestSinglePolicy, ClassifierPolicy, KnnPolicy

        return {"best-single": BestSinglePolicy, "knn": KnnPolicy, "classifier": ClassifierPolicy}[name](outcomes)
    if name.startswith("lm:"):  # the LM router (policy/lm): its own name grammar, see make_lm_policy
        from .lm import make_lm_policy

        return make_lm_policy(name)
    if name == "oracle":
        raise ConfigError("the oracle policy needs the answer key: use it with `maestro predict` or `maestro eval`",
                          field="policy")
    close = difflib.get_close_matches(name, ["neural", "rules", "random", "oracle", "fixed:", "lm:", *TRAINED_POLICIES], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}.{hint}", field="policy")
