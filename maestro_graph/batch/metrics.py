"""The counters of a batch run, in the Prometheus text format `maestro serve` exposes at `/metrics` and under the
same names, written next to the run's results: what a batch run on a cluster did is read the way a server's
traffic is (episodes by outcome, expert calls and failures per card, cache hits, items per worker).

They are counted on the driver from what the episodes recorded (each step's call ledger), so nothing is measured
twice and a worker that died and ran its item again counts the item once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client import Counter as PromCounter

from ..types import Step

__all__ = ["BatchMetrics"]


class BatchMetrics:
    """Counters of one run (each run has its own registry, so two runs in one process never share counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.episodes = PromCounter("maestro_episodes", "Episodes finished, by outcome (answered, no_answer, failed).",
                                    ["outcome"], registry=r)
        self.expert_calls = PromCounter("maestro_expert_calls", "Expert calls made inside episodes, by model.",
                                        ["model"], registry=r)
        self.expert_errors = PromCounter("maestro_expert_errors", "Expert calls that failed, by model.", ["model"],
                                         registry=r)
        self.cache_hits = PromCounter("maestro_cache_hits", "Expert calls and whole steps replayed from the cache.",
                                      ["kind"], registry=r)
        self.worker_items = PromCounter("maestro_batch_items", "Items finished, by the worker that ran them.",
                                        ["worker"], registry=r)

    def observe(self, steps: list[Step], *, failed: bool, answered: bool) -> None:
        """One finished episode and the calls its steps made."""
        self.episodes.labels("failed" if failed else "answered" if answered else "no_answer").inc()
        for step in steps:
            if step.cached:
                self.cache_hits.labels("step").inc()
            for call in step.calls:
                if call.get("cached"):
                    self.cache_hits.labels("call").inc()
                    continue
                self.expert_calls.labels(call["model"]).inc()
                if call.get("error"):
                    self.expert_errors.labels(call["model"]).inc()

    def write(self, path: Path, done_by_worker: Counter[str]) -> None:
        """The counters as a Prometheus text file (node-exporter's textfile collector reads it as it is)."""
        for worker, items in done_by_worker.items():
            self.worker_items.labels(worker).inc(items)
        write_to_textfile(str(path), self.registry)
