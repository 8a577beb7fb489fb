"""What the commands that run episodes over task files (`predict`, `eval`) share: one set of options (the registry,
the episode's budgets, how many items and where they run, the expert cache), declared once and handed to each
command as one value, so the two commands cannot drift apart in their flags, defaults or set-up."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import executor as start_executor
from .common import registry as open_registry
from .options import (
    CacheDirOpt,
    CacheTtlOpt,
    CacheUrlOpt,
    ExecutorOpt,
    LimitOpt,
    MaxCostOpt,
    MaxTurnsOpt,
    NoCacheOpt,
    ReachFloorOpt,
    RegistryOpt,
    WorkersOpt,
    WorkerWaitOpt,
)

__all__ = ["BatchRun", "batch_run_options"]


@dataclass(frozen=True)
class BatchRun:
    """The shared options of a batch command, as given (`--no-cache` already applied: no cache folder, no URL)."""

    registry: Path | None
    max_turns: int
    max_cost: float
    reach_floor: float
    limit: int | None
    workers: int
    cache_dir: Path | None
    cache_url: str | None
    cache_ttl_s: int
    executor: str
    worker_wait_s: float

    def load_registry(self):
        """The registry with its expert cache, or a usage error naming what is wrong with it."""
        return open_registry(self.registry, self.cache_dir, self.cache_url, cache_ttl_s=self.cache_ttl_s)

    def open_executor(self, reg):
        """Where the episodes run (started after the command has checked its own arguments: a Ray cluster takes
        seconds to join)."""
        return start_executor(self.executor, reg, self.registry, self.cache_dir, self.cache_url, self.workers,
                              self.cache_ttl_s, worker_wait_s=self.worker_wait_s)

    def context(self):
        """Each episode's budgets."""
        from ...episode.context import MaestroContext

        return MaestroContext(max_turns=self.max_turns, max_cost=self.max_cost, reach_floor=self.reach_floor)


_OPTIONS: list[tuple[str, Any, Any]] = [
    ("registry", Path | None, RegistryOpt), ("max_turns", int, MaxTurnsOpt), ("max_cost", float, MaxCostOpt),
    ("reach_floor", float, ReachFloorOpt), ("limit", int | None, LimitOpt), ("workers", int, WorkersOpt),
    ("cache_dir", Path, CacheDirOpt), ("no_cache", bool, NoCacheOpt), ("cache_url", str | None, CacheUrlOpt),
    ("cache_ttl_s", int, CacheTtlOpt), ("executor", str, ExecutorOpt), ("worker_wait_s", float, WorkerWaitOpt)]
"""The options in the order `--help` lists them: name, type, typer option."""


def batch_run_options(func: Callable) -> Callable:
    """Decorate a typer command that takes `run: BatchRun`: in its signature (and so its `--help`) that parameter
    becomes the shared options, in its place; the command is called with them gathered into one BatchRun."""
    signature = inspect.signature(func)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
    at = [p.name for p in params].index("run")
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=option)
              for name, kind, option in _OPTIONS]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name, _, _ in _OPTIONS}
        if given.pop("no_cache"):
            given.update(cache_dir=None, cache_url=None)
        return func(**kwargs, run=BatchRun(**given))

    parameters = [*params[:at], *shared, *params[at + 1:]]
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command
