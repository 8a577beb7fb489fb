"""Procedural benchmark generators, one module per domain, the registry that names them, and the suite writer.

Every generator is `make(rng: random.Random) -> Draft`, a pure function of its random stream; `QUESTIONS` in each
module lists the wordings per question type (at least three each)."""

from __future__ import annotations

from .base import Domain, Draft
from .registry import DOMAINS
from .suite import SPLITS, CheckReport, check_suite, item_seed, make_item, make_suite, split_of_seed, suite_seeds

__all__ = ["DOMAINS", "Domain", "Draft", "SPLITS", "CheckReport", "check_suite", "item_seed", "make_item",
           "make_suite", "split_of_seed", "suite_seeds"]
