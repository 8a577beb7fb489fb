"""`maestro eval`: several policies through the same graph on the same items, with a report and a summary table
that fits the terminal it is printed in."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ...errors import MaestroError
from .batch_run import BatchRun, batch_run_options
from .common import console, err, fail, limit_threads, narrow, print_skipped
from .options import POLICY_HELP
from .predict import PredictExit, report_losses

__all__ = ["evaluate"]

HEADS = {"macro acc": "macro", "accuracy": "acc", "mean cost": "cost", "calls/ep": "calls",
         "calls/ep, no pair right": "calls*", "no answer": "none", "ECE": "ece", "p50 s": "p50_s",
         "cache hits": "hits", "wall s": "wall_s"}
"""The summary's columns: the head a wide terminal shows, and the one word a narrow one shows (never cut)."""


@batch_run_options
def evaluate(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="Task file (repeat)."),
    policy: list[str] = typer.Option(..., "--policy", "-p",
                                     help=f"{POLICY_HELP} | best-single | knn | classifier | oracle (repeat)"),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for results.json, report.md, predictions, plots."),
    train_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                           help="Training task file for best-single, knn and classifier (repeat)."),
    run: BatchRun = None,  # type: ignore[assignment]  # the shared options (batch_run_options)
) -> None:
    """Evaluate several policies through the same graph on the same items; write a report with tables and plots."""
    limit_threads()
    from ...policy import TRAINED_POLICIES, make_policy
    from ...training.evaluation.evaluate import evaluate as run_evaluation
    from ...training.evaluation.report import write_report

    reg = run.load_registry()
    for name in policy:
        if name == "oracle" or name in TRAINED_POLICIES:
            continue
        try:
            make_policy(name)
        except MaestroError as exc:
            fail(str(exc))
    if any(p in TRAINED_POLICIES for p in policy) and not train_tasks:
        fail(f"policies {[p for p in policy if p in TRAINED_POLICIES]} are trained: pass --train-tasks FILE")
    try:
        runner = run.open_executor(reg)
        evaluation = run_evaluation(reg, tasks, policy, train_tasks=train_tasks, workers=run.workers,
                                    limit=run.limit, executor=runner, predictions_dir=out / "predictions",
                                    context=run.context())
    except (ValueError, MaestroError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted:[/yellow] the episodes that finished are in {out / 'predictions'}; "
                  "rerun the command to evaluate again (finished expert calls replay from the cache)")
        raise typer.Exit(130) from None
    _print_summary(write_report(evaluation, out), out)
    print_skipped(evaluation.skipped)
    if evaluation.skipped:
        console.print(f"[yellow]{len(evaluation.skipped)} items skipped[/yellow] (listed in results.json)")
    results = evaluation.results
    losses = report_losses([w for r in results for w in r.lost], sum(r.node_failures for r in results),
                           sum(r.cache_errors for r in results))
    if losses:
        raise typer.Exit(PredictExit.LOST_CAPACITY)


def _print_summary(results: dict, out: Path) -> None:
    """One row per policy; in a narrow terminal one-word heads without borders, what they stand for under the
    table, and the cache hits and wall time left to report.md, so that a row fits."""
    no_pair = results["no_pair_items"]
    thin = narrow()
    left_out = {"cache hits", "wall s"} if thin else set()  # in results.json and report.md
    shown = [h for h in HEADS if (no_pair or h != "calls/ep, no pair right") and h not in left_out]
    table = Table("policy", title=f"evaluation -> {out}/report.md", box=box.SIMPLE_HEAD if thin else box.HEAVY_HEAD)
    for head in shown:
        table.add_column(HEADS[head] if thin else head, justify="right", no_wrap=thin)
    table.columns[0].overflow = "fold"  # a long policy name (fixed:MODEL@@SKILL) wraps, never cut
    for name, m in results["policies"].items():
        closed = f"({m['no_answer_closed']})" if thin else f"({m['no_answer_closed']} with choices or yes/no)"
        row = {"macro acc": f"{m['macro_accuracy']:.3f}", "accuracy": f"{m['accuracy']:.3f}",
               "mean cost": f"{m['mean_cost']:.2f}", "calls/ep": f"{m['calls_per_episode']:.2f}",
               "calls/ep, no pair right": f"{no_pair['calls_per_episode'][name]:.2f}" if no_pair else "",
               "no answer": f"{m['no_answer']} {closed}", "ECE": "-" if m["ece"] is None else f"{m['ece']:.3f}",
               "p50 s": f"{m['latency_p50_s']:.2f}", "cache hits": str(m["cache_hits"]), "wall s": f"{m['wall_s']:.0f}"}
        table.add_row(escape(name), *(row[h] for h in shown))
    console.print(table)
    if thin:
        console.print("; ".join(f"{HEADS[h]}: {h}" for h in shown).replace(
            "none: no answer", "none: episodes without an answer (in brackets: of questions with choices or yes/no)"
        ).replace("ece: ECE", "ece: expected calibration error of the confidences (10 bins)")
            + f"; cache hits and wall time: {out}/report.md")
    if no_pair:
        console.print(f"{no_pair['items']} items no pair answers (the oracle's misses)")
