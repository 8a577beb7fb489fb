"""Policies: the protocol, the baselines, and `make_policy` that resolves a policy name (policy.catalog)."""

from __future__ import annotations

from .base import ActionSpace, Distribution, EpisodeView, Policy, best_candidate
from .catalog import (
    DEFAULT_POLICY,
    POLICY_NAMES,
    SERVED_POLICIES,
    TRAINED_POLICIES,
    PolicyCatalog,
    PolicyNotOffered,
    make_policy,
)
from .oracle import OraclePolicy
from .shipped import SHIPPED_CHECKPOINT
from .simple import FixedPolicy, RandomPolicy, RankingPolicy, RulesPolicy

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

