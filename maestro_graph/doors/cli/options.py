"""The options several commands share, written once so that their flags, defaults and help never drift apart."""

from __future__ import annotations

from pathlib import Path

import typer

from ...cache.backends import DEFAULT_TTL_S
from ...core.configs import DEFAULT_WORKER_WAIT_S, MAX_COST, MAX_TURNS, Budget, typer_option
from ...core.environment import CACHE_DIR, CACHE_TTL_S
from ...registry.reach import REACH_FLOOR

__all__ = ["POLICY_HELP", "CacheDirOpt", "CacheTtlOpt", "CacheUrlOpt", "ExecutorOpt", "LimitOpt", "MaxCostOpt",
           "MaxTurnsOpt", "NoCacheOpt", "ReachFloorOpt", "RegistryOpt", "WorkersOpt", "WorkerWaitOpt"]

POLICY_HELP = ("neural (the shipped checkpoint) | rules | random | fixed:MODEL@@SKILL | lm:shipped#choice "
               "(the paper's LM router as a composite: the shipped neural policy chooses the expert, SmolLM2 decides "
               "when to answer) | lm:... (docs/lm-router.md)")
"""The policy names every command's --policy help starts with."""
RegistryOpt = typer.Option(None, "--registry", "-r", help="Registry config YAML (default: the packaged local one).")
MaxTurnsOpt = typer_option(Budget, "max_turns", min=1, max=MAX_TURNS)
MaxCostOpt = typer_option(Budget, "max_cost", min=0, max=MAX_COST)
ReachFloorOpt = typer.Option(
    REACH_FLOOR, min=0, max=1, help="Stop before the next call when fewer of the 10 most similar calibration questions "
    "were answered by a pair not yet called than this (the registry's reach, written by `maestro registry profile`; "
    "a registry without one is never stopped); 0: off (docs/evaluation.md: Knowing when nothing fits).")
LimitOpt = typer.Option(None, min=1, help="Only the first N items.")
WorkersOpt = typer.Option(2, min=1, help="Episodes run at once (per-model limits still apply).")
CacheDirOpt = typer.Option(Path(CACHE_DIR.default), envvar=CACHE_DIR.name,
                           help="Persistent cache of expert calls and skill steps.")
NoCacheOpt = typer.Option(False, "--no-cache", help="Call every expert afresh.")
CacheUrlOpt = typer.Option(None, "--cache-url", help="Shared expert cache on Redis (redis://HOST:PORT/DB), so "
                           "workers never repeat each other's calls; --cache-dir is its local fallback.")
CacheTtlOpt = typer.Option(DEFAULT_TTL_S, "--cache-ttl-s", min=0, envvar=CACHE_TTL_S.name,
                           help="Seconds a Redis cache entry lives after it is written; 0: until Redis evicts it "
                           "(docs/scale.md: The Redis cache).")
ExecutorOpt = typer.Option("thread", "--executor", help="Where episodes run: thread (--workers threads here) | ray "
                           "(a local Ray cluster of --workers actors) | ray:ADDRESS (an existing cluster; needs the "
                           "`ray` extra).")
WorkerWaitOpt = typer.Option(DEFAULT_WORKER_WAIT_S, "--worker-wait-s", min=1, help="With --executor ray: give up "
                             "after this many seconds with no Ray worker ready to take items (none ready yet: a worker "
                             "still building its registry is not; or every one lost with its node); the records that "
                             "finished are kept, and the run exits 4 saying how many items ran.")
