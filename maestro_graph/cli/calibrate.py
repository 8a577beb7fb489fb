"""`maestro calibrate`: fit the confidence model on scored episodes and show how well it is calibrated."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..errors import MaestroError
from .common import console, fail

__all__ = ["calibrate"]


def calibrate(
    predictions: list[Path] = typer.Option(..., "--predictions", exists=True, dir_okay=False,
                                           help="Prediction file of scored episodes to fit on (`maestro eval`'s "
                                           "OUT/predictions/POLICY.jsonl; repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="The confidence model to write (JSON)."),
    check: list[Path] = typer.Option([], "--check", exists=True, dir_okay=False,
                                     help="Prediction file of other episodes: the fitted model's expected "
                                     "calibration error on them (repeat)."),
) -> None:
    """Fit the confidence model (the probability that an answer is right) on scored episodes.

    It is fitted on the recorded evidence of the episodes; a graph built with it (`build_graph(...,
    confidence=ConfidenceModel.read(OUT))`, or the package's checkpoints/confidence.json) answers with calibrated
    confidences. Fit on items other than those you report."""
    from ..evaluation.calibration import fit_confidence, judged_answers

    try:
        model, fitted = fit_confidence(predictions)
        held_out = judged_answers(check) if check else None
    except MaestroError as exc:
        fail(str(exc))
    model.save(out)
    table = Table("episodes", "answers", "accuracy", "ECE (10 bins)", title=f"confidence model -> {out}")
    for name, judged in (("fitted on", fitted), *((("checked on", held_out),) if held_out else ())):
        ece = judged.ece(model)
        table.add_row(name, str(len(judged.right)), f"{sum(judged.right) / max(1, len(judged.right)):.3f}",
                      "-" if ece is None else f"{ece:.3f}")
    console.print(table)
    if held_out:  # the reliability diagram of the other episodes, as a table
        bins = Table("confidence", "answers", "mean confidence", "accuracy", title="reliability on --check")
        for b in held_out.reliability(model):
            bins.add_row(f"{b.low:.1f}-{b.high:.1f}", str(b.count), *(("-", "-") if not b.count else
                                                                      (f"{b.confidence:.3f}", f"{b.accuracy:.3f}")))
        console.print(bins)
