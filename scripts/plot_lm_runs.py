"""Several `maestro train-lm` runs in one figure, one line per run: validation accuracy by GRPO step (step 0 is the
model GRPO started from: the SFT warm start, or the untrained model), the training reward, and the expert calls per
rollout episode. For comparing seeds or settings; each run's own `reward_curve.png` shows every logged metric.

    .venv/bin/python scripts/plot_lm_runs.py runs/gpu/grpo40-s0 runs/gpu/grpo40-s1 runs/gpu/grpo40-s2 \\
        --out docs/figures/lm-router-grpo-gpu.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from maestro_graph.core.plots import pyplot

PANELS = (("validation/accuracy", "validation accuracy"), ("reward", "training reward"),
          ("rewards/calls/mean", "expert calls per episode"))


def history(run: Path) -> list[dict]:
    """The GRPO phase of a finished run's train_log.jsonl, with the validation figure GRPO started from as step 0."""
    summary = json.loads((run / "summary.json").read_text())
    start = summary.get("after_sft", summary.get("before"))
    grpo = [h for h in map(json.loads, (run / "train_log.jsonl").read_text().splitlines()) if h.get("phase") == "grpo"]
    return ([{"step": 0, "validation/accuracy": start["accuracy"]}] if start else []) + grpo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="train-lm out folders (finished runs)")
    parser.add_argument("--out", type=Path, required=True, help="figure file (.png)")
    args = parser.parse_args()
    plt = pyplot(str(args.out))
    if plt is None:
        raise SystemExit(1)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.2))
    for run in args.runs:
        points = history(run)
        for ax, (key, _) in zip(axes, PANELS):
            xy = [(h["step"], h[key]) for h in points if key in h]
            ax.plot([p[0] for p in xy], [p[1] for p in xy], marker="o" if key.startswith("validation") else None,
                    markersize=3, label=run.name)
    for ax, (_, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("GRPO step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(args.out)


if __name__ == "__main__":
    main()
