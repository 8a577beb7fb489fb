"""Running episodes through the graph: one at a time (`run_episode`) or over a task file (`predict`)."""

from __future__ import annotations

import json
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from .graph import MaestroContext, build_graph
from .evaluation.outcomes import PairOutcomes
from .policy import OraclePolicy, make_policy
from .policy.base import Policy
from .registry import Registry
from .tasks import Task, TaskProblem, load_tasks
from .types import Step

__all__ = ["EpisodeResult", "run_episode", "run_tasks", "predict", "PredictSummary"]


@dataclass
class EpisodeResult:
    """One finished episode. `error` is set only when the episode itself could not run (never for expert faults,
    which are recorded in the steps)."""

    answer: str | None
    steps: list[Step]
    stop_reason: str
    latency_s: float
    error: str | None = None

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)

    def prediction(self, task_id: str) -> dict[str, Any]:
        """A prediction-file record (DESIGN.md)."""
        return {
            "id": task_id,
            "answer": self.answer,
            "steps": [
                {"model": s.model, "skill": s.skill, "cost": round(s.cost, 6), "latency_s": round(s.latency_s, 4),
                 "answer": s.answer, "error": s.error}
                for s in self.steps
            ],
            "cost": round(self.cost, 6),
            "latency_s": round(self.latency_s, 4),
            "stop_reason": self.stop_reason,
            "error": self.error,
        }


def run_episode(
    graph: Any,
    question: str,
    images: list[str],
    choices: list[str] | None = None,
    *,
    context: MaestroContext | None = None,
    config: dict | None = None,
    resume: bool = False,
) -> EpisodeResult:
    """Run one episode to its end. The recursion limit follows the turn budget (two supersteps per turn).
    `resume=True` continues the checkpointed thread in `config` from its last step instead of starting over; a
    finished thread returns its stored result."""
    context = context or MaestroContext()
    run_config = {"recursion_limit": 2 * context.max_turns + 6, **(config or {})}
    start = time.perf_counter()
    stored = graph.get_state(run_config) if graph.checkpointer is not None and config else None
    if stored is not None and stored.values and not stored.next:
        out = stored.values  # a finished thread: its stored result
    else:
        payload = None if resume else {"question": question, "images": images, "choices": choices}
        out = graph.invoke(payload, run_config, context=context)
    return EpisodeResult(
        answer=out.get("answer"),
        steps=[Step.model_validate(s) for s in out.get("steps", [])],
        stop_reason=out.get("stop_reason", ""),
        latency_s=time.perf_counter() - start,
    )


def _judge(task: Task):
    return lambda candidate: task.score(candidate) >= 1.0


@dataclass
class PredictSummary:
    """Counts of a predict run, with accuracy per source (items with an answer key only)."""

    total: int = 0
    failed: int = 0
    skipped: list[TaskProblem] = field(default_factory=list)
    by_source: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def accuracy(self) -> dict[str, float]:
        return {src: sum(v) / len(v) for src, v in sorted(self.by_source.items()) if v}


def _task_context(context: MaestroContext, task: Task) -> MaestroContext:
    """Each task gets its own sampling seed, so results do not depend on the order episodes run in."""
    return replace(context, seed=zlib.crc32(task.id.encode()) ^ (context.seed or 0))


def run_tasks(
    registry: Registry,
    tasks: list[Task],
    policy_name: str | Policy,
    *,
    context: MaestroContext | None = None,
    outcomes: PairOutcomes | None = None,
    workers: int = 1,
) -> Iterator[tuple[Task, EpisodeResult]]:
    """Episodes of one policy (a name, or a policy object such as the one being trained) over tasks, `workers` at a
    time (per-model concurrency limits still hold), yielded in task order; results are the same as a serial run."""
    context = context or MaestroContext()
    if policy_name == "oracle":
        # the oracle tries every pair: give it a turn per pair and no cost cap
        context = replace(context, max_turns=len(registry.pairs()) + 1, max_cost=float("inf"))

        def one(task: Task) -> EpisodeResult:
            graph = build_graph(registry, OraclePolicy(_judge(task)))
            return _safe_episode(graph, task, _task_context(context, task))
    else:
        policy = make_policy(policy_name, outcomes=outcomes) if isinstance(policy_name, str) else policy_name
        graph = build_graph(registry, policy)

        def one(task: Task) -> EpisodeResult:
            return _safe_episode(graph, task, _task_context(context, task))

    if workers <= 1:
        yield from ((task, one(task)) for task in tasks)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        yield from zip(tasks, pool.map(one, tasks))


def _safe_episode(graph: Any, task: Task, context: MaestroContext) -> EpisodeResult:
    try:
        return run_episode(graph, task.question, task.images, task.choices, context=context)
    except Exception as exc:  # batch boundary: one broken item must not stop the run; it is recorded
        return EpisodeResult(None, [], "error", 0.0, error=f"{exc.__class__.__name__}: {exc}")


def predict(
    registry: Registry,
    tasks_file: str | Path,
    out_file: str | Path,
    *,
    policy: str,
    context: MaestroContext | None = None,
    limit: int | None = None,
    workers: int = 1,
    progress: bool = True,
    resume: bool = False,
) -> PredictSummary:
    """Write one prediction per task; bad lines of the task file are reported and skipped. With `resume`, the
    predictions already in `out_file` (from an interrupted run) are kept and their items skipped, so an interruption
    loses at most the episodes that were running; a torn last line and failed episodes are redone."""
    tasks, problems = load_tasks(tasks_file)
    tasks = tasks[:limit] if limit else tasks
    summary = PredictSummary(total=len(tasks), skipped=problems)
    out_path = Path(out_file)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    kept = _finished_records(out_path, {t.id for t in tasks}) if resume else []
    _rewrite(out_path, kept)
    for record in kept:
        if "score" in record:
            task = next(t for t in tasks if t.id == record["id"])
            summary.by_source[task.source or "unknown"].append(record["score"])
    done = {r["id"] for r in kept}
    tasks = [t for t in tasks if t.id not in done]
    bar = tqdm(total=len(tasks), desc=f"predict {policy}", unit="item", disable=not progress)
    with out_path.open("a", encoding="utf-8") as out:
        for task, result in run_tasks(registry, tasks, policy, context=context, workers=workers):
            record = result.prediction(task.id)
            if task.answer is not None:
                record["score"] = task.score(result.answer)
                summary.by_source[task.source or "unknown"].append(record["score"])
            summary.failed += result.error is not None
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            scored = [s for v in summary.by_source.values() for s in v]
            postfix = {"acc": f"{sum(scored) / max(1, len(scored)):.3f}", "failed": summary.failed}
            if registry.cache is not None:
                postfix["cache_hits"] = registry.cache.stats.hits
            bar.set_postfix(postfix)
            bar.update()
    bar.close()
    return summary


def _finished_records(out_path: Path, ids: set[str]) -> list[dict]:
    """The complete, successful predictions of `ids` in an existing prediction file (first one per id)."""
    if not out_path.is_file():
        return []
    records: dict[str, dict] = {}
    for line in out_path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line being written when the run was killed
            continue
        if isinstance(record, dict) and record.get("id") in ids and record.get("error") is None:
            records.setdefault(record["id"], record)
    return list(records.values())


def _rewrite(out_path: Path, records: list[dict]) -> None:
    """Replace the file atomically with `records` (none: an empty file), dropping torn and superseded lines."""
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, out_path)
