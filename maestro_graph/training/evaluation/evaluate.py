"""`maestro eval`: every policy through the same graph on the same items in one run, with metrics per policy."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ...answer_forms import expected_form
from ...batch.executors import Executor, LostWorker
from ...batch.measure import measure_pairs
from ...batch.metrics import BatchMetrics
from ...core.calibration import expected_calibration_error, reliability_bins
from ...core.tasks import Task, TaskProblem, load_task_files
from ...episode.context import MaestroContext
from ...episode.runner import EpisodeResult, run_tasks
from ...policy import TRAINED_POLICIES
from ...policy.base import Policy
from ...registry import Registry
from ...registry.outcomes import PairOutcomes
from ...types import ErrorKind

__all__ = ["PolicyResult", "EvalRun", "evaluate", "file_stem", "run_policy"]


@dataclass
class PolicyResult:
    """Per-episode records of one policy and the metrics derived from them."""

    policy: str
    records: list[dict] = field(default_factory=list)
    cache_hits: int = 0
    cache_misses: int = 0
    wall_s: float = 0.0
    lost: list[LostWorker] = field(default_factory=list)
    """Workers the executor lost while this policy ran (died, or never started)."""
    node_failures: int = 0
    """Steps that failed on their node (ErrorKind.NODE)."""
    cache_errors: int = 0
    """Expert-cache reads and writes that failed while this policy ran."""

    def metrics(self) -> dict:
        by_source: dict[str, list[float]] = defaultdict(list)
        by_domain: dict[str, list[float]] = defaultdict(list)
        pairs: Counter[str] = Counter()
        routing: dict[str, Counter[str]] = defaultdict(Counter)
        for r in self.records:
            by_source[r["source"]].append(r["score"])
            by_domain[r["domain"]].append(r["score"])
            called = {f"{s['model']}@@{s['skill']}" for s in r["steps"]}
            pairs.update(called)
            routing[r["source"]].update(called)
        n = max(1, len(self.records))
        latencies = [r["latency_s"] for r in self.records] or [0.0]
        decisions = [d["latency_s"] for r in self.records for d in r.get("decisions", [])
                     if d.get("latency_s") is not None] or [0.0]
        source_acc = {s: float(np.mean(v)) for s, v in sorted(by_source.items())}
        judged = [r for r in self.records if r["answer"] is not None and r.get("confidence") is not None]
        confidence, right = [r["confidence"] for r in judged], [r["score"] for r in judged]
        return {
            "items": len(self.records),
            "accuracy": float(np.mean([r["score"] for r in self.records])) if self.records else 0.0,
            "macro_accuracy": float(np.mean(list(source_acc.values()))) if source_acc else 0.0,
            "accuracy_by_source": source_acc,
            "accuracy_by_domain": {d: float(np.mean(v)) for d, v in sorted(by_domain.items())},
            "mean_cost": float(np.mean([r["cost"] for r in self.records])) if self.records else 0.0,
            "latency_p50_s": float(np.percentile(latencies, 50)),
            "latency_p95_s": float(np.percentile(latencies, 95)),
            "decision_p50_ms": 1000 * float(np.percentile(decisions, 50)),
            "calls_per_episode": float(np.mean([len(r["steps"]) for r in self.records])) if self.records else 0.0,
            "pair_share": {p: c / n for p, c in pairs.most_common()},
            "routing": {s: {p: c / len(by_source[s]) for p, c in cnt.items()} for s, cnt in routing.items()},
            "failures": sum(1 for r in self.records if r["failed"]),
            "no_answer": sum(1 for r in self.records if r["answer"] is None),
            "closed_items": sum(1 for r in self.records if r.get("closed_form")),
            "no_answer_closed": sum(1 for r in self.records if r.get("closed_form") and r["answer"] is None),
            "ece": expected_calibration_error(confidence, right),
            "reliability": [b.__dict__ for b in reliability_bins(confidence, right)],
            "confidence_items": len(judged),
            "answer_sources": dict(Counter(r.get("answer_source") or "none" for r in self.records)),
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "wall_s": self.wall_s,
        }


@dataclass
class EvalRun:
    results: list[PolicyResult]
    skipped: list[TaskProblem]
    train_file: str | None
    task_files: list[str]
    outcomes: PairOutcomes | None = None
    """Every pair's score on every training item (what the trained routers were fitted on)."""

    @property
    def best_single_pair(self) -> str | None:
        return self.outcomes.best_single() if self.outcomes else None

    def no_pair_calls(self) -> dict | None:
        """Calls per episode of each policy on the items no pair answers (no step of the oracle, which tries every
        pair, answered right; a right guess among options does not count), where the right move is to stop early;
        None without an `oracle` run."""
        oracle = next((r for r in self.results if r.policy == "oracle"), None)
        if oracle is None:
            return None
        missed = {r["id"] for r in oracle.records if not r["step_right"]}
        calls = {r.policy: [len(x["steps"]) for x in r.records if x["id"] in missed] for r in self.results}
        return {"items": len(missed), "calls_per_episode": {p: float(np.mean(c)) if c else 0.0
                                                            for p, c in calls.items()}}


def evaluate(
    registry: Registry,
    task_files: list[Path],
    policies: list[str],
    *,
    train_tasks: list[Path] | tuple[Path, ...] = (),
    train_items: list[Task] | tuple[Task, ...] = (),
    context: MaestroContext | None = None,
    workers: int = 2,
    limit: int | None = None,
    progress: bool = True,
    predictions_dir: Path | None = None,
    executor: Executor | None = None,
    select: Callable[[Task], bool] | None = None,
) -> EvalRun:
    """Run every policy on the same items (on `executor`; default `workers` threads), the items of `task_files`
    that `select` keeps (all by default) up to `limit`; the trained routers are fitted on the items of `train_tasks`
    plus `train_items` (an experiment's selection of a file, say). With `predictions_dir`, each
    episode's record is written to `<policy>.jsonl` there as soon as it finishes, so a run that is interrupted or
    crashes keeps what it did (the report does not write them again)."""
    tasks, skipped = load_task_files(task_files)
    if not tasks:
        first = f"; the first: {skipped[0].file}:{skipped[0].line}: {skipped[0].error}" if skipped else ""
        raise ValueError(f"no item of {', '.join(map(str, task_files))} can run ({len(skipped)} lines skipped{first})")
    tasks = [t for t in tasks if select(t)] if select is not None else tasks
    tasks = tasks[:limit] if limit else tasks
    outcomes: PairOutcomes | None = None
    if any(p in TRAINED_POLICIES for p in policies):
        if not train_tasks and not train_items:
            raise ValueError(f"policies {[p for p in policies if p in TRAINED_POLICIES]} need --train-tasks FILE")
        evaluated = {Path(f).resolve() for f in task_files}
        leaked = [str(f) for f in train_tasks if Path(f).resolve() in evaluated]
        if leaked:
            raise ValueError(f"{leaked[0]} is both a training and an evaluated file: evaluation items would leak "
                             "into training")
        train = load_task_files(train_tasks)[0] + list(train_items)
        held_out = {t.identity() for t in tasks}
        if any(t.identity() in held_out for t in train_items):
            raise ValueError("a training item is also evaluated: evaluation items would leak into training")
        outcomes = measure_pairs(registry, train, workers=workers, progress=progress, executor=executor)
    results = []
    for policy in policies:
        results.append(run_policy(registry, tasks, policy, context=context, outcomes=outcomes, workers=workers,
                                  progress=progress, predictions_dir=predictions_dir, executor=executor))
    fitted_on = [*map(str, train_tasks), *([f"{len(train_items)} selected items"] if train_items else [])]
    return EvalRun(results, skipped, ", ".join(fitted_on) or None, [str(f) for f in task_files], outcomes)


def run_policy(registry: Registry, tasks: list[Task], policy: str | Policy, *, context: MaestroContext | None = None,
               outcomes: PairOutcomes | None = None, workers: int = 1, progress: bool = False,
               predictions_dir: Path | None = None, executor: Executor | None = None) -> PolicyResult:
    """One policy (a name, or a policy object such as the one being trained) over `tasks`: the records the metrics
    and reports read (in task order), optionally written to `predictions_dir` episode by episode as they finish, with
    the run's counters beside them (`<policy>.metrics.prom`, as `maestro predict` writes them: batch.metrics)."""
    name = policy if isinstance(policy, str) else policy.name
    result = PolicyResult(name)
    stats = registry.cache.stats if registry.cache else None
    hits0, misses0, errors0 = (stats.hits, stats.misses, stats.errors) if stats else (0, 0, 0)
    lost_before = len(executor.lost) if executor is not None else 0
    start = time.perf_counter()
    sink, metrics = None, BatchMetrics()
    done_before = Counter(executor.done_by_worker if executor is not None else {})
    if predictions_dir is not None:
        predictions_dir.mkdir(parents=True, exist_ok=True)
        sink = (predictions_dir / f"{file_stem(name)}.jsonl").open("w", encoding="utf-8")
    bar = tqdm(total=len(tasks), desc=f"eval {name}", unit="item", disable=not progress)
    try:
        for task, episode in run_tasks(registry, tasks, policy, context=context, outcomes=outcomes, workers=workers,
                                       executor=executor, ordered=False):
            result.records.append(_record(task, episode))
            result.node_failures += sum(step.error_kind == ErrorKind.NODE for step in episode.steps)
            if sink is not None:  # the records and the counters written beside them
                sink.write(json.dumps(result.records[-1], ensure_ascii=False) + "\n")
                sink.flush()
                metrics.observe(episode.steps, failed=episode.failed, answered=episode.answer is not None)
            acc = np.mean([r["score"] for r in result.records])
            bar.set_postfix(acc=f"{acc:.3f}", cache_hits=(stats.hits - hits0) if stats else "off")
            bar.update()
    finally:
        bar.close()
        result.lost = executor.lost[lost_before:] if executor is not None else []
        result.cache_errors = stats.errors - errors0 if stats else 0
        if sink is not None:
            assert predictions_dir is not None  # the sink is a file there
            sink.close()
            done = Counter(executor.done_by_worker if executor is not None else {})
            done.subtract(done_before)
            metrics.write(predictions_dir / f"{file_stem(name)}.metrics.prom", +done, result.lost,
                          result.cache_errors)
    result.wall_s = time.perf_counter() - start
    order = {task.id: i for i, task in enumerate(tasks)}
    result.records.sort(key=lambda r: order[r["id"]])
    if stats:
        result.cache_hits, result.cache_misses = stats.hits - hits0, stats.misses - misses0
    return result


def _record(task: Task, episode: EpisodeResult) -> dict:
    """One episode as a prediction record, with the item's score, source and domain (what the metrics read)."""
    row = episode.prediction(task.id)
    row["score"] = task.score(episode.answer)
    row["source"] = task.source or "unknown"
    row["domain"] = task.domain or "unknown"
    # whether a step's own answer was right (the oracle's steps: whether any pair answers the item)
    row["step_right"] = any(task.score(s.answer) > 0 for s in episode.steps if s.answer is not None)
    # options (given or inline) or a yes/no form: an item that never needs to end without an answer
    row["closed_form"] = expected_form(task.question, task.options) in {"choice", "yesno"}
    return row


MAX_STEM = 120
"""Longest file stem of a policy's files; a longer name (an ensemble of several checkpoint paths) is cut and keeps
a digest of the whole, so two names never share a file and no name exceeds a file system's 255 bytes."""


def file_stem(policy: str) -> str:
    """A file-name-safe form of a policy name (`fixed:a@@b` -> `fixed_a__b`, paths flattened)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", policy.replace("@@", "__"))
    if len(stem) <= MAX_STEM:
        return stem
    return f"{stem[:MAX_STEM - 17]}-{hashlib.sha256(policy.encode()).hexdigest()[:16]}"

