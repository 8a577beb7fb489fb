"""`maestro predict`: one policy over a task file, written as a prediction file; and the exit status of a batch
run, which says what a script should look into."""

from __future__ import annotations

from enum import IntFlag
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ...errors import MaestroError, NoLiveWorker
from .batch_run import BatchRun, batch_run_options
from .common import console, err, fail, limit_threads, print_skipped
from .options import POLICY_HELP

__all__ = ["PredictExit", "predict", "report_losses"]


class PredictExit(IntFlag):
    """`maestro predict`'s exit status, so that a script can tell a clean run from one to look into
    (docs/evaluation.md). The kinds of trouble add up: 3 is failed episodes and skipped lines, 5 failed episodes on
    a run that lost capacity. `maestro eval` exits with LOST_CAPACITY alone (its failures are measurements)."""

    ALL_RAN = 0
    FAILED = 1
    """some episodes failed (crashed, or their input was unreadable); they are in the prediction file, marked"""
    SKIPPED = 2
    """task-file lines were skipped as bad input; 2 is also every usage error, which stops the run before it starts"""
    LOST_CAPACITY = 4
    """the run ran on less than it asked for: workers died or never started, or steps failed on their node (its
    disk, memory or files); every item may still have been answered, by the workers that remained"""

    @classmethod
    def of(cls, failed: int, skipped: int, lost: int = 0) -> PredictExit:
        return cls(cls.FAILED * (failed > 0) | cls.SKIPPED * (skipped > 0) | cls.LOST_CAPACITY * (lost > 0))


def report_losses(lost: list, node_failures: int, cache_errors: int) -> int:
    """Print what a batch run lost (workers by name, steps failed on their node) and the cache errors it ran
    through; returns how many losses there were (cache errors are not: the steps ran uncached)."""
    for worker in lost:
        err.print(f"[red]lost worker[/red] {escape(str(worker))}")
    if lost:
        err.print(f"[red]{len(lost)} workers lost[/red]: the items ran on the remaining workers")
    if node_failures:
        err.print(f"[red]{node_failures} steps failed on their node[/red] (error kind `node` in the records)")
    if cache_errors:
        err.print(f"[yellow]{cache_errors} expert-cache reads or writes failed[/yellow]; those calls and steps ran "
                  "uncached")
    return len(lost) + node_failures


@batch_run_options
def predict(
    tasks: Path = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Prediction file to write (JSONL)."),
    policy: str | None = typer.Option(None, "--policy", "-p", help=f"{POLICY_HELP} | oracle; default: neural"),
    run: BatchRun = None,  # type: ignore[assignment]  # the shared options (batch_run_options)
    resume: bool = typer.Option(False, "--resume", help="Keep the predictions already in OUT; run only the rest."),
) -> None:
    """Run POLICY over every item of a task file and write the prediction file; prints accuracy per source.

    Exit status (the codes add up):
    0 every item ran;
    1 some episodes failed (recorded in OUT with `failed: true`);
    2 some task-file lines were skipped as bad input, or a usage error stopped the run;
    4 the run lost capacity: workers died or never started, or steps failed on their node (each named on stderr
    and in the metrics file), or no Ray worker was alive for --worker-wait-s, and the run gave up (the message says
    how many items ran; --resume runs the rest)."""
    limit_threads()
    from ...episode.runner import predict as run_predict
    from ...policy import DEFAULT_POLICY, make_policy

    policy = policy or DEFAULT_POLICY
    reg = run.load_registry()
    if policy != "oracle":
        try:
            make_policy(policy)
        except MaestroError as exc:
            fail(str(exc))
    runner = run.open_executor(reg)
    try:
        summary = run_predict(reg, tasks, out, policy=policy, limit=run.limit, workers=run.workers, resume=resume,
                              executor=runner, context=run.context())
    except MaestroError as exc:  # the cluster gave out mid-run: what finished is in OUT
        fail(f"{exc}; the predictions that finished are in {out}: rerun with --resume to run the rest",
             PredictExit.LOST_CAPACITY if isinstance(exc, NoLiveWorker) else 2)
    print_skipped(summary.skipped)
    table = Table("source", "items", "accuracy", title=f"{policy} on {tasks.name}")
    for source, values in sorted(summary.by_source.items()):
        table.add_row(source, str(len(values)), f"{sum(values) / len(values):.3f}")
    console.print(table)
    console.print(f"{summary.total} items, {summary.failed} failed, {len(summary.skipped)} skipped -> {out} "
                  f"(counters: {summary.metrics_file})")
    if reg.cache is not None:
        stats = reg.cache.stats
        console.print(f"expert cache {reg.cache.location}: {stats.hits} hits, {stats.misses} misses "
                      f"({stats.hit_rate:.0%} hit rate), {stats.corrupt} corrupt, {stats.errors} errors")
    losses = report_losses(summary.lost, summary.node_failures, summary.cache_errors)
    raise typer.Exit(PredictExit.of(summary.failed, len(summary.skipped), losses))
