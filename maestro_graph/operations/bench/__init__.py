"""Benchmarks: the procedural suite (generators, splits, self-check); evaluation and reports live beside it."""

from __future__ import annotations

from .generate import DOMAINS, SPLITS, check_suite, make_suite

__all__ = ["DOMAINS", "SPLITS", "check_suite", "make_suite"]
