#!/usr/bin/env python
"""Cost awareness: train the neural policy at several cost weights, evaluate each beside the fixed pairs and the
oracle on the same items, and plot accuracy against mean cost (the Pareto curve).

    .venv/bin/python scripts/cost_sweep.py --train TRAIN.jsonl --tasks TEST.jsonl --out runs/sweep \
        --weights 0 0.1 0.3 --steps 100 --advantage-std-floor 0.5
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from maestro_graph.cache.store import ExpertCache  # noqa: E402
from maestro_graph.core.configs import add_arguments, from_arguments  # noqa: E402
from maestro_graph.core.tasks import load_task_files  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.training.rl.config import NeuralGRPOConfig  # noqa: E402
from maestro_graph.training.rl.experiments import evaluate_into, train_resumable  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.05, 0.2])
    parser.add_argument("--cache-dir", default=".maestro-cache")
    add_arguments(parser, NeuralGRPOConfig, exclude=("cost_weight",))  # the training settings, from the one config
    args = parser.parse_args()
    torch.set_num_threads(1)
    registry = Registry.load(args.registry, cache=ExpertCache(args.cache_dir))
    train, _ = load_task_files([args.train])
    policies = []
    for weight in args.weights:
        run_dir = args.out / f"cost_{weight:g}"
        config = from_arguments(NeuralGRPOConfig, args, cost_weight=weight)
        policies.append(train_resumable(registry, train, config, run_dir))
    fixed = [f"fixed:{pair}" for pair in registry.pair_ids()]
    results = evaluate_into(args.out / "eval", registry, [args.tasks], [*policies, *fixed, "oracle"])
    _plot(results["policies"], args.weights, args.out / "pareto.png")
    summary = {p: {k: results["policies"][p][k] for k in ("macro_accuracy", "mean_cost", "calls_per_episode")}
               for p in policies}
    print(json.dumps(summary, indent=2))


def _plot(metrics: dict, weights: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    neural = [(m["mean_cost"], m["macro_accuracy"]) for p, m in metrics.items() if p.startswith("neural:")]
    ax.plot(*zip(*neural), "o-", label="neural (cost weights " + ", ".join(f"{w:g}" for w in weights) + ")")
    for (cost, acc), w in zip(neural, weights):
        ax.annotate(f"w={w:g}", (cost, acc), fontsize=8)
    fixed = [(m["mean_cost"], m["macro_accuracy"]) for p, m in metrics.items() if p.startswith("fixed:")]
    ax.scatter(*zip(*fixed), marker="x", color="gray", label="fixed pairs")
    ax.scatter(metrics["oracle"]["mean_cost"], metrics["oracle"]["macro_accuracy"], marker="*", s=120, color="red",
               label="oracle")
    ax.set_xlabel("mean cost per episode")
    ax.set_ylabel("macro accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
