"""Writing an evaluation run: results.json, a readable report.md, and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...core.calibration import ECE_BINS
from ...core.plots import pyplot
from .evaluate import EvalRun, file_stem
from .figures import cost_figure, reliability_figure

__all__ = ["write_report"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(run: EvalRun, out_dir: Path) -> dict:
    """Write results.json, report.md and the plots under `out_dir` (the predictions are written while `evaluate`
    runs, with `predictions_dir=out_dir / "predictions"`); returns the results dictionary written to results.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = {r.policy: r.metrics() for r in run.results}
    results: dict[str, Any] = {
        "task_files": run.task_files,
        "train_file": run.train_file,
        "best_single_pair": run.best_single_pair,
        "skipped_items": [p.__dict__ for p in run.skipped],
        "policies": metrics,
        "no_pair_items": run.no_pair_calls(),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    training = ""
    if run.outcomes is not None:
        run.outcomes.save(out_dir / "train_outcomes.json")
        training = _table(["source", "items", "best single pair", "its accuracy", "oracle (any pair right)"],
                          [[r.source, str(r.items), r.best_pair, f"{r.best_accuracy:.3f}", f"{r.oracle_accuracy:.3f}"]
                           for r in run.outcomes.by_source()])
    sources = sorted({s for m in metrics.values() for s in m["accuracy_by_source"]})
    plots = _plots(metrics, sources, out_dir)
    main = _table(
        ["policy", "macro acc", "accuracy", "mean cost", "calls/ep", "p50 s", "p95 s", "decision p50 ms", "failed",
         "no answer", "no answer (choices, yes/no)", "cache hits", "wall s"],
        [[p, f"{m['macro_accuracy']:.3f}", f"{m['accuracy']:.3f}", f"{m['mean_cost']:.2f}",
          f"{m['calls_per_episode']:.2f}", f"{m['latency_p50_s']:.2f}", f"{m['latency_p95_s']:.2f}",
          f"{m['decision_p50_ms']:.1f}", str(m["failures"]), str(m["no_answer"]),
          f"{m['no_answer_closed']}/{m['closed_items']}", f"{m['cache_hits']}/{m['cache_hits'] + m['cache_misses']}",
          f"{m['wall_s']:.0f}"] for p, m in metrics.items()],
    )
    no_pair = results["no_pair_items"]
    stop_early = [] if no_pair is None else [
        f"## Items no pair answers ({no_pair['items']}: the oracle's misses)", "",
        "Calls per episode where every call is wasted; a policy that knows nothing fits stops early.", "",
        _table(["policy", "calls/ep"], [[p, f"{c:.2f}"] for p, c in no_pair["calls_per_episode"].items()]), ""]
    per_source = _table(["source", *metrics], [[s, *(f"{m['accuracy_by_source'].get(s, float('nan')):.3f}"
                                                     for m in metrics.values())] for s in sources])
    calibration = _calibration(metrics)
    domains = sorted({d for m in metrics.values() for d in m["accuracy_by_domain"]})
    per_domain = _table(["domain", *metrics], [[d, *(f"{m['accuracy_by_domain'].get(d, float('nan')):.3f}"
                                                     for m in metrics.values())] for d in domains])
    text = [
        "# Evaluation report", "",
        f"Tasks: {', '.join(run.task_files)}" + (f"; routers trained on {run.train_file}" if run.train_file else ""),
        f"Best single pair (chosen on the training file): {run.best_single_pair}" if run.best_single_pair else "",
        f"Items skipped (bad lines or missing images): {len(run.skipped)}", "",
        "## Policies (macro accuracy = mean over sources)", "", main, "", *stop_early,
        *calibration, "## Accuracy per source", "", per_source, "", "## Accuracy per domain", "", per_domain, "",
        *(["## Plots", "", *[f"![{p.stem}]({p.name})" for p in plots], ""] if plots else []),
    ]
    if training:
        text += ["## Every pair on the training items (train_outcomes.json)", "", training, ""]
    (out_dir / "report.md").write_text("\n".join(text))
    return results


def _calibration(metrics: dict) -> list[str]:
    """The report's section on how sure the answers were: each policy's expected calibration error and its
    reliability diagram as a table (the plot is `reliability.png`)."""
    summary = _table(
        ["policy", "answers with a confidence", "ECE (10 bins)", "mean confidence", "accuracy of those answers"],
        [[p, str(m["confidence_items"]), "-" if m["ece"] is None else f"{m['ece']:.3f}",
          _mean(m, "confidence"), _mean(m, "accuracy")] for p, m in metrics.items()])
    bins = next(iter(metrics.values()))["reliability"] if metrics else []
    diagram = _table(
        ["confidence", *(f"{p}: accuracy (answers)" for p in metrics)],
        [[f"{b['low']:.1f}-{b['high']:.1f}", *(_cell(m["reliability"][i]) for m in metrics.values())]
         for i, b in enumerate(bins)])
    return [f"## How sure the answers were (expected calibration error, {ECE_BINS} bins)", "",
            "Each answer's `confidence` is the probability that it is right; in a calibrated policy the answers of "
            "each confidence bin are right that often (`reliability.png`).", "", summary, "", diagram, ""]


def _mean(m: dict, key: str) -> str:
    bins = [b for b in m["reliability"] if b["count"]]
    total = sum(b["count"] for b in bins)
    return f"{sum(b['count'] * b[key] for b in bins) / total:.3f}" if total else "-"


def _cell(b: dict) -> str:
    return f"{b['accuracy']:.2f} ({b['count']})" if b["count"] else "-"


def _plots(metrics: dict, sources: list[str], out_dir: Path) -> list[Path]:
    plt = pyplot("the accuracy and cost plots")
    if plt is None:
        return []

    paths = []
    policies = list(metrics)
    fig, ax = plt.subplots(figsize=(max(6, len(sources) * 1.1), 4))
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        ax.bar(np.arange(len(sources)) + i * width, [metrics[policy]["accuracy_by_source"].get(s, 0) for s in sources],
               width, label=policy)
    ax.set_xticks(np.arange(len(sources)) + 0.4 - width / 2, sources, rotation=30, ha="right")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("accuracy per source")
    fig.tight_layout()
    paths.append(out_dir / "accuracy_by_source.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for name, figure in (("accuracy_vs_cost.png", cost_figure), ("reliability.png", reliability_figure)):
        fig = figure(plt, metrics)
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=110)  # not bbox_inches="tight": the labels were placed on this layout
        plt.close(fig)

    for policy in policies:
        if policy.startswith("fixed:"):
            continue
        routing = metrics[policy]["routing"]
        pairs = sorted({p for r in routing.values() for p in r})
        if not pairs:
            continue
        grid = np.array([[routing.get(s, {}).get(p, 0.0) for p in pairs] for s in sources])
        fig, ax = plt.subplots(figsize=(max(6, len(pairs) * 0.45), max(3, len(sources) * 0.4)))
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(pairs)), pairs, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(sources)), sources, fontsize=8)
        ax.set_title(f"routing of {policy}: share of episodes calling each pair")
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        paths.append(out_dir / f"routing_{file_stem(policy)}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
