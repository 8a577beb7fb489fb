"""`maestro calibrate`: fit the confidence model on scored episodes and show how well it is calibrated: over all
answers, with each source weighing alike, and leaving each source out of the fit in turn."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ...errors import MaestroError
from .common import console, fail

__all__ = ["calibrate"]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def calibrate(
    predictions: list[Path] = typer.Option(..., "--predictions", exists=True, dir_okay=False,
                                           help="Prediction file of scored episodes to fit on (`maestro eval`'s "
                                           "OUT/predictions/POLICY.jsonl; repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="The confidence model to write (JSON)."),
    check: list[Path] = typer.Option([], "--check", exists=True, dir_okay=False,
                                     help="Prediction file of other episodes: the fitted model's expected "
                                     "calibration error on them (repeat)."),
    leave_one_source_out: bool = typer.Option(
        False, "--leave-one-source-out",
        help="Also fit on every source but one of all the answers given (--predictions and --check), measure on "
        "the one left out, each source in turn: a table per source and pooled."),
    figures: Path | None = typer.Option(None, "--figures", file_okay=False,
                                        help="Folder for the reliability diagram of each left-out source (PNG)."),
) -> None:
    """Fit the confidence model (the probability that an answer is right) on scored episodes.

    It is fitted on the recorded evidence of the episodes; a graph built with it (`build_graph(...,
    confidence=ConfidenceModel.read(OUT))`, or the package's checkpoints/confidence.json) answers with calibrated
    confidences. Fit on items other than those you report. Each ECE is given over all answers and source-balanced
    (each source's answers weighing alike); a bin's gap counts where it holds 10 answers or more, and is shown beside
    the gap a perfectly calibrated model would show on as many answers by chance alone."""
    from ...training.evaluation.calibration import fit_confidence, judged_answers, worst_gap

    try:
        model, fitted = fit_confidence(predictions)
        held_out = judged_answers(check) if check else None
    except MaestroError as exc:
        fail(str(exc))
    model.save(out)
    table = Table("episodes", "answers", "accuracy", "ECE (10 bins)", "ECE source-balanced", "worst bin gap",
                  "by chance alone", title=f"confidence model -> {out}")
    for name, judged in (("fitted on", fitted), *((("checked on", held_out),) if held_out else ())):
        median, high = judged.chance_gap(model)
        table.add_row(name, str(len(judged.right)), f"{sum(judged.right) / max(1, len(judged.right)):.3f}",
                      _number(judged.ece(model)), _number(judged.ece(model, balanced=True)),
                      _number(worst_gap(judged.reliability(model))), f"{median:.3f} / {high:.3f}")
    console.print(table)
    console.print("by chance alone: the worst bin gap (median / 90th percentile) of a perfectly calibrated model on "
                  "the same answers, their outcomes drawn from its confidences")
    if held_out:  # the reliability diagram of the other episodes, as a table
        bins = Table("confidence", "answers", "mean confidence", "accuracy", title="reliability on --check")
        for b in held_out.reliability(model):
            bins.add_row(f"{b.low:.1f}-{b.high:.1f}", str(b.count), *(("-", "-") if not b.count else
                                                                      (f"{b.confidence:.3f}", f"{b.accuracy:.3f}")))
        console.print(bins)
    if leave_one_source_out:
        _leave_one_source_out(predictions + check, figures)


def _leave_one_source_out(files: list[Path], figures: Path | None) -> None:
    from ...training.evaluation.calibration import Fold, judged_answers, leave_one_source_out

    try:
        folds, pooled = leave_one_source_out(judged_answers(files))
    except MaestroError as exc:
        fail(str(exc))
    table = Table("left out", "answers", "accuracy", "mean confidence", "ECE (10 bins)", "worst bin gap",
                  title="leave one source out: fitted on the other sources")
    for fold in (*folds, pooled):
        table.add_row(fold.source, str(fold.answers), f"{fold.accuracy:.3f}", f"{fold.confidence:.3f}",
                      _number(fold.ece), _number(fold.worst_gap), end_section=fold is folds[-1])
    balanced = sum(f.ece or 0.0 for f in folds) / len(folds)
    console.print(table)
    console.print(f"mean of the sources' ECE (each source alike): {balanced:.3f}")
    if figures is None:
        return
    from ...core.plots import pyplot
    from ...training.evaluation.figures import reliability_figure

    plt = pyplot("the leave-one-source-out reliability diagrams")
    if plt is None:
        return
    figures.mkdir(parents=True, exist_ok=True)

    def metrics(fold: Fold) -> dict:
        return {"reliability": [b.__dict__ for b in fold.reliability], "ece": fold.ece}

    for fold in (*folds, pooled):
        fig = reliability_figure(plt, {f"{fold.source} (left out)": metrics(fold)})
        fig.savefig(figures / f"loso-{fold.source}.png", dpi=110)
        plt.close(fig)
    console.print(f"reliability diagrams: {figures}/loso-*.png")
