"""Running episodes through the graph: one at a time (`run_episode`) or over a task file (`predict`)."""

from __future__ import annotations

import json
import os
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from langgraph.types import StateSnapshot
from tqdm import tqdm

from ..batch.executors import Executor, LostWorker, ThreadExecutor
from ..batch.metrics import BatchMetrics
from ..core.configs import MAX_COST, MAX_TURNS
from ..core.jsonl import read_jsonl
from ..core.tasks import Task, TaskProblem, load_tasks
from ..policy import OraclePolicy, make_policy
from ..policy.base import Policy
from ..registry import Registry
from ..registry.outcomes import PairOutcomes
from ..types import Decision, ErrorKind, Step, StopReason, Turn, stop_text
from .context import MaestroContext
from .graph import build_graph
from .state import AnswerSource

__all__ = ["EpisodeResult", "RECORD_VERSION", "ThreadMode", "checkpoint_step", "episode_finished", "run_episode",
           "run_tasks", "predict", "PredictSummary", "thread_mode"]


RECORD_VERSION = 2
"""Prediction records hold every step whole (input, evidence, confidence, error kind) and the router's decisions."""


@dataclass
class EpisodeResult:
    """One finished episode: the trajectory record that prediction files, export and trainers all read. `error` is
    set only when the episode itself could not run (never for expert faults, which are recorded in the steps)."""

    answer: str | None
    steps: list[Step]
    stop: StopReason
    latency_s: float
    error: str | None = None
    decisions: list[Decision] = field(default_factory=list)
    """Every router decision, with its log-probability under the acting policy (types.Decision)."""
    answer_source: AnswerSource | None = None
    """Who gave the answer ("policy", "candidate" or a marked "guess"); None without one."""
    stop_detail: str | None = None
    """An input error's reason."""
    confidence: float | None = None
    """The probability that the answer is right (for an answer withheld below `min_confidence`, the withheld
    one's); None without an answer."""
    confidence_basis: dict[str, float] | None = None
    """The evidence `confidence` was computed from (episode.confidence.confidence_features): what `maestro
    calibrate` fits a confidence model on."""
    question: str | None = None
    """The question the episode was routed on: the one asked, or the one read from the image for a blank question
    (a trainer re-scores the decisions on what the router saw)."""
    choices: list[str] | None = None
    """The options it was routed with: those given, else those written in the question routed on."""

    def __post_init__(self) -> None:
        self.stop = StopReason(self.stop)

    @property
    def stop_reason(self) -> str:
        """The stop reason as clients and prediction files show it (`input error: <reason>`)."""
        return stop_text(self.stop, self.stop_detail)

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)

    @property
    def failed(self) -> bool:
        """The episode could not do its work: it crashed (`error`), its input was at fault (StopReason.INPUT_ERROR),
        or every step that ran a skill failed on its input (an unreadable image), even when a guess was answered.
        Such an episode is still scored but counted as failed, so a run over broken files never reports
        "0 failed"."""
        ran = [s for s in self.steps if s.error_kind != ErrorKind.POLICY]
        return (self.error is not None or self.stop == StopReason.INPUT_ERROR
                or (bool(ran) and all(s.error_kind == ErrorKind.INPUT for s in ran)))

    def prediction(self, task_id: str) -> dict[str, Any]:
        """A prediction-file record (docs/evaluation.md), version RECORD_VERSION: the whole trajectory, so nothing that
        reads it has to re-run a step."""
        return {
            "version": RECORD_VERSION,
            "id": task_id,
            "answer": self.answer,
            "answer_source": self.answer_source,
            "confidence": self.confidence,
            "confidence_basis": self.confidence_basis,
            "steps": [{**s.model_dump(mode="json", exclude={"calls"}), "cost": round(s.cost, 6),
                       "latency_s": round(s.latency_s, 4)} for s in self.steps],
            "decisions": [d.model_dump(mode="json") for d in self.decisions],
            "cost": round(self.cost, 6),
            "latency_s": round(self.latency_s, 4),
            "stop": self.stop,
            "stop_detail": self.stop_detail,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "failed": self.failed,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EpisodeResult:
        """The episode of a prediction record, as `record` wrote it."""
        return cls(answer=record.get("answer"), steps=[Step.model_validate(s) for s in record.get("steps", [])],
                   stop=StopReason(record["stop"]), stop_detail=record.get("stop_detail"),
                   latency_s=record.get("latency_s", 0.0), error=record.get("error"),
                   decisions=[Decision.model_validate(d) for d in record.get("decisions", [])],
                   answer_source=record.get("answer_source"), confidence=record.get("confidence"),
                   confidence_basis=record.get("confidence_basis"))


ThreadMode = Literal["new", "resume", "replay"]


def thread_mode(snapshot: Any, question: str) -> ThreadMode:
    """The thread rule, one for every door (`maestro ask --thread`, `maestro serve`, the graphs): the thread's
    current question asked again resumes it from its last step when unfinished and replays its stored result when
    finished; any other question starts a new episode on the thread, whose earlier episodes become its history."""
    values = snapshot.values
    if not values or values.get("asked", values.get("question")) != question:
        return "new"
    return "replay" if episode_finished(snapshot) else "resume"


def episode_finished(snapshot: Any) -> bool:
    """An episode ended when the answer node has written its stop reason and nothing is left to run. (A thread
    whose last task finished just before the process stopped may show no next node yet no stop reason: its
    results are pending writes, and resuming carries on from them.)"""
    return bool(snapshot.values.get("stop")) and not snapshot.next


def checkpoint_step(snapshot: StateSnapshot) -> int | None:
    """The step of a snapshot of a thread's history (`get_state_history`): a stored checkpoint's, which has
    metadata."""
    assert snapshot.metadata is not None
    return snapshot.metadata.get("step")


def run_episode(
    graph: Any,
    question: str,
    images: list[str],
    choices: list[str] | None = None,
    *,
    context: MaestroContext | None = None,
    config: dict | None = None,
    history: list[Turn] | None = None,
) -> EpisodeResult:
    """Run one episode to its end. The recursion limit follows the turn budget (`MaestroContext.recursion_limit`).
    On the checkpointed thread of `config`, `thread_mode` says whether the question resumes the thread, replays its
    stored result or starts a new episode on it. `history`: the conversation the question continues when the caller
    keeps it (it overrides the thread's)."""
    context = context or MaestroContext()
    run_config = {"recursion_limit": context.recursion_limit, **(config or {})}
    start = time.perf_counter()
    stored = graph.get_state(run_config) if graph.checkpointer is not None and config else None
    mode = thread_mode(stored, question) if stored is not None else "new"
    if mode == "replay":
        assert stored is not None  # `thread_mode` replays a stored thread only
        out = stored.values
    else:
        payload = None if mode == "resume" else {"question": question, "images": images, "choices": choices,
                                                 **({"history": history} if history else {})}
        out = graph.invoke(payload, run_config, context=context)
    routed = (out.get("episodes") or [{}])[-1]  # this episode's record: the question and options routed on
    return EpisodeResult(
        answer=out.get("answer"),
        steps=[Step.model_validate(s) for s in out.get("steps", [])],
        stop=out.get("stop") or StopReason.POLICY,
        stop_detail=out.get("stop_detail"),
        latency_s=time.perf_counter() - start,
        decisions=[Decision.model_validate(d) for d in out.get("decisions", [])],
        answer_source=out.get("answer_source"),
        confidence=out.get("confidence"),
        confidence_basis=out.get("confidence_basis"),
        question=routed.get("question"),
        choices=routed.get("choices"),
    )


def _judge(task: Task):
    return lambda candidate: task.score(candidate) >= 1.0


@dataclass
class PredictSummary:
    """Counts of a predict run, with accuracy per source (items with an answer key only)."""

    total: int = 0
    failed: int = 0
    skipped: list[TaskProblem] = field(default_factory=list)
    metrics_file: Path | None = None
    """The run's counters in the Prometheus text format (batch.metrics), next to the predictions."""
    lost: list[LostWorker] = field(default_factory=list)
    """Workers the executor lost during this run (died, or never started)."""
    node_failures: int = 0
    """Steps that failed on their node (ErrorKind.NODE): the node's disk, memory or files, not the item."""
    cache_errors: int = 0
    """Expert-cache reads and writes that failed during this run (run uncached instead), workers' included."""
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
    executor: Executor | None = None,
    ordered: bool = True,
) -> Iterator[tuple[Task, EpisodeResult]]:
    """Episodes of one policy (a name, or a policy object such as the one being trained) over tasks, on `executor`
    (default: `workers` threads here; per-model concurrency limits still hold), yielded in task order, or as they
    finish with `ordered=False` (what a writer wants: each record written the moment it exists). Results are the
    same as a serial run's: each task has its own sampling seed."""
    context = context or MaestroContext()
    if policy_name == "oracle":
        # the oracle tries every pair: a turn per pair and every question, within the largest budget a run may have
        context = replace(context, max_turns=min(len(registry.pairs()) + 1, MAX_TURNS), max_cost=MAX_COST,
                          reach_floor=0.0)
    runs = (executor or ThreadExecutor(registry, workers)).map_unordered(_EpisodeJob(policy_name, context, outcomes),
                                                                         tasks)
    if not ordered:
        yield from ((tasks[i], result) for i, result in runs)
        return
    waiting: dict[int, EpisodeResult] = {}
    next_out = 0
    for i, result in runs:  # hold early finishers until every task before them is out
        waiting[i] = result
        while next_out in waiting:
            yield tasks[next_out], waiting.pop(next_out)
            next_out += 1


class _EpisodeJob:
    """One policy's episode on a task, as an executor job (executors.Job): the policy (a name, built once per worker
    registry, or an object), the run context and the pair outcomes the trained routers need. The oracle is built
    per task, since it judges with the task's answer key."""

    def __init__(self, policy: str | Policy, context: MaestroContext, outcomes: PairOutcomes | None):
        self.policy = policy
        self.context = context
        self.outcomes = outcomes
        self._graph: tuple[Registry, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_graph": None}  # a worker builds its own graph over its own registry

    def __call__(self, registry: Registry, task: Task) -> EpisodeResult:
        if self.policy == "oracle":
            graph = build_graph(registry, OraclePolicy(_judge(task)))
        else:
            if self._graph is None or self._graph[0] is not registry:
                policy = (make_policy(self.policy, outcomes=self.outcomes) if isinstance(self.policy, str)
                          else self.policy)
                self._graph = (registry, build_graph(registry, policy))
            graph = self._graph[1]
        return _safe_episode(graph, task, _task_context(self.context, task))


def _safe_episode(graph: Any, task: Task, context: MaestroContext) -> EpisodeResult:
    try:
        return run_episode(graph, task.question, task.images, task.choices, context=context)
    except Exception as exc:  # batch boundary: one broken item must not stop the run; it is recorded
        return EpisodeResult(None, [], StopReason.ERROR, 0.0, error=f"{exc.__class__.__name__}: {exc}")


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
    executor: Executor | None = None,
) -> PredictSummary:
    """Write one prediction per task, each as soon as its episode finishes (in completion order, on `executor`;
    default `workers` threads); bad lines of the task file are reported and skipped. With `resume`, the
    predictions already in `out_file` (from an interrupted run) are kept and their items skipped, so an interruption
    loses at most the episodes that were running; a torn last line and episodes that crashed are redone (an episode
    whose input was unreadable is kept: running it again would read the same input). The counters of the episodes
    this run finished go to `<out stem>.metrics.prom` (batch.metrics)."""
    tasks, problems = load_tasks(tasks_file)
    tasks = tasks[:limit] if limit else tasks
    summary = PredictSummary(total=len(tasks), skipped=problems)
    out_path = Path(out_file)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    kept = _finished_records(out_path, {t.id for t in tasks}) if resume else []
    _rewrite(out_path, kept)
    for record in kept:
        summary.failed += bool(record.get("failed"))  # a file from before the field was recorded: not counted
        if "score" in record:
            task = next(t for t in tasks if t.id == record["id"])
            summary.by_source[task.source or "unknown"].append(record["score"])
    done = {r["id"] for r in kept}
    tasks = [t for t in tasks if t.id not in done]
    executor = executor or ThreadExecutor(registry, workers)
    metrics = BatchMetrics()
    lost_before = len(executor.lost)
    errors_before = registry.cache.stats.errors if registry.cache is not None else 0
    bar = tqdm(total=len(tasks), desc=f"predict {policy}", unit="item", disable=not progress)
    with out_path.open("a", encoding="utf-8") as out:
        for task, result in run_tasks(registry, tasks, policy, context=context, executor=executor, ordered=False):
            record = result.prediction(task.id)
            if task.answer is not None:
                record["score"] = task.score(result.answer)
                summary.by_source[task.source or "unknown"].append(record["score"])
            summary.failed += record["failed"]
            metrics.observe(result.steps, failed=record["failed"], answered=result.answer is not None)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            scored = [s for v in summary.by_source.values() for s in v]
            postfix = {"acc": f"{sum(scored) / max(1, len(scored)):.3f}", "failed": summary.failed,
                       "workers": len(executor.done_by_worker)}
            if registry.cache is not None:
                postfix["cache_hits"] = registry.cache.stats.hits
            bar.set_postfix(postfix)
            bar.update()
    bar.close()
    summary.metrics_file = out_path.with_name(f"{out_path.stem}.metrics.prom")
    summary.lost = executor.lost[lost_before:]
    summary.node_failures = metrics.node_failures
    summary.cache_errors = (registry.cache.stats.errors if registry.cache is not None else 0) - errors_before
    metrics.write(summary.metrics_file, executor.done_by_worker, summary.lost, summary.cache_errors)
    return summary


def _finished_records(out_path: Path, ids: set[str]) -> list[dict]:
    """The complete predictions of `ids` that did not crash, in an existing prediction file (first one per id). The
    line being written when the run was killed (malformed, possibly cut inside a multi-byte character) is dropped
    and its item redone."""
    if not out_path.is_file():
        return []
    records: dict[str, dict] = {}
    for line in read_jsonl(out_path):
        record = line.value
        if isinstance(record, dict) and record.get("id") in ids and record.get("error") is None:
            records.setdefault(record["id"], record)
    return list(records.values())


def _rewrite(out_path: Path, records: list[dict]) -> None:
    """Replace the file atomically with `records` (none: an empty file), dropping torn and superseded lines."""
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, out_path)
