"""The counters of a batch run, in the Prometheus text format `maestro serve` exposes at `/metrics` and under the
same names, written next to the run's results: what a batch run on a cluster did is read the way a server's
traffic is (episodes by outcome, expert calls and failures per card, cache hits, items per worker), with what the run
lost on the way (workers that died or never started, steps that failed on their node, cache errors).

They are counted on the driver from what the episodes recorded (each step's call ledger), so nothing is measured
twice and an item whose worker died and ran again elsewhere counts once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client import Counter as PromCounter

from ..types import ErrorKind, Step

if TYPE_CHECKING:
    from .executors import LostWorker

__all__ = ["BatchMetrics", "EpisodeCounters"]


class EpisodeCounters:
    """The counters a batch run and `maestro serve` share, under the same names: episodes by outcome, and the expert
    calls, failures and cache hits read from each step's call ledger."""

    def __init__(self, registry: CollectorRegistry, outcomes: str):
        self.episodes = PromCounter("maestro_episodes", f"Episodes finished, by outcome ({outcomes}).", ["outcome"],
                                    registry=registry)
        self.expert_calls = PromCounter("maestro_expert_calls", "Expert calls made inside episodes, by model.",
                                        ["model"], registry=registry)
        self.expert_errors = PromCounter("maestro_expert_errors", "Expert calls that failed, by model.", ["model"],
                                         registry=registry)
        self.cache_hits = PromCounter("maestro_cache_hits", "Expert calls and whole steps replayed from the cache.",
                                      ["kind"], registry=registry)

    def count_steps(self, steps: Iterable[dict[str, Any]]) -> None:
        """The calls of steps (as recorded: dicts with `cached` and `calls`); a replayed call is a hit, not a call."""
        for step in steps:
            if step.get("cached"):
                self.cache_hits.labels("step").inc()
            for call in step.get("calls", []):
                if call.get("cached"):
                    self.cache_hits.labels("call").inc()
                    continue
                self.expert_calls.labels(call["model"]).inc()
                if call.get("error"):
                    self.expert_errors.labels(call["model"]).inc()


class BatchMetrics:
    """Counters of one run (each run has its own registry, so two runs in one process never share counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.counters = EpisodeCounters(self.registry, "answered, no_answer, failed")
        self.worker_items = PromCounter("maestro_batch_items", "Items finished, by the worker that ran them.",
                                        ["worker"], registry=self.registry)
        self.workers_lost = PromCounter("maestro_batch_workers_lost", "Workers that died (stage run) or could not "
                                        "start (stage start), by worker.", ["worker", "stage"], registry=self.registry)
        self.node_steps = PromCounter("maestro_node_step_failures", "Steps that failed on their node (error kind "
                                      "node: its disk, memory or files), by model.", ["model"], registry=self.registry)
        self.cache_errors = PromCounter("maestro_cache_errors", "Expert-cache reads and writes that failed (run "
                                        "uncached instead).", registry=self.registry)
        self.node_failures = 0
        """Steps of this run that failed on their node."""

    def observe(self, steps: list[Step], *, failed: bool, answered: bool) -> None:
        """One finished episode and the calls its steps made."""
        self.counters.episodes.labels("failed" if failed else "answered" if answered else "no_answer").inc()
        self.counters.count_steps({"cached": step.cached, "calls": step.calls} for step in steps)
        for step in steps:
            if step.error_kind == ErrorKind.NODE:
                self.node_steps.labels(step.model).inc()
                self.node_failures += 1

    def write(self, path: Path, done_by_worker: Counter[str], lost: Iterable[LostWorker] = (),
              cache_errors: int = 0) -> None:
        """The counters as a Prometheus text file (node-exporter's textfile collector reads it as it is)."""
        for worker, items in done_by_worker.items():
            self.worker_items.labels(worker).inc(items)
        for gone in lost:
            self.workers_lost.labels(gone.name, gone.stage).inc()
        self.cache_errors.inc(cache_errors)
        write_to_textfile(str(path), self.registry)
