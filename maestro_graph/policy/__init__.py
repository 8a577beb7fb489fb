"""Policies: the protocol, the baselines, and `make_policy` that resolves a policy name."""

from __future__ import annotations

import difflib

from ..errors import ConfigError
from .base import ActionSpace, Distribution, EpisodeView, Policy, best_candidate
from .oracle import OraclePolicy
from .simple import FixedPolicy, RandomPolicy, RulesPolicy

__all__ = [
    "ActionSpace",
    "Distribution",
    "EpisodeView",
    "FixedPolicy",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "RulesPolicy",
    "best_candidate",
    "make_policy",
    "POLICY_NAMES",
    "DEFAULT_POLICY",
]

POLICY_NAMES = ("rules", "random", "fixed:MODEL@@SKILL", "oracle")
DEFAULT_POLICY = "rules"


def make_policy(name: str) -> Policy:
    """A policy by name. `oracle` is refused here: it needs a per-task judge (see OraclePolicy)."""
    if name == "rules":
        return RulesPolicy()
    if name == "random":
        return RandomPolicy()
    if name.startswith("fixed:"):
        try:
            return FixedPolicy(name.removeprefix("fixed:"))
        except ValueError as exc:
            raise ConfigError(f"{exc}; write fixed:MODEL@@SKILL, e.g. fixed:rapidocr@@chart-qa", field="policy") from exc
    if name == "oracle":
        raise ConfigError("the oracle policy needs the answer key: use it with `maestro predict` only", field="policy")
    close = difflib.get_close_matches(name, ["rules", "random", "oracle", "fixed:"], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}.{hint}", field="policy")
