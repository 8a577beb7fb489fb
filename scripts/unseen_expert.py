#!/usr/bin/env python
"""Generalisation to an expert added after training: train with the barcode models and the barcode-reading skill
left out of the registry (and no barcode tasks), then evaluate the same checkpoint twice, without and with them.

    .venv/bin/python scripts/unseen_expert.py --train TRAIN.jsonl --tasks TEST.jsonl --out runs/unseen --steps 60
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from maestro_graph.cache import ExpertCache  # noqa: E402
from maestro_graph.evaluation.evaluate import evaluate, load_task_files  # noqa: E402
from maestro_graph.evaluation.report import write_report  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.rl.grpo import GRPOConfig, GRPOTrainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--capability", default="barcode", help="capability whose models and skills are held out")
    parser.add_argument("--registry", default=None)
    parser.add_argument("--cache-dir", default=".maestro-cache")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--tasks-per-step", type=int, default=GRPOConfig.tasks_per_step)
    parser.add_argument("--group-size", type=int, default=GRPOConfig.group_size)
    parser.add_argument("--cost-weight", type=float, default=GRPOConfig.cost_weight)
    parser.add_argument("--advantage-std-floor", type=float, default=GRPOConfig.advantage_std_floor)
    args = parser.parse_args()
    torch.set_num_threads(1)
    full = Registry.load(args.registry, cache=ExpertCache(args.cache_dir))
    held_models = {name for name, h in full.models.items() if args.capability in h.card.capabilities}
    held_skills = {s.name for s in full.skills.values() if args.capability in s.requires}
    before = full.without(models=held_models, skills=held_skills)
    train, _ = load_task_files([args.train])
    # no task of the held-out kind: items the full registry can only solve with the held-out skills are dropped
    train = [t for t in train if t.domain != args.capability]
    config = GRPOConfig(steps=args.steps, seed=args.seed, tasks_per_step=args.tasks_per_step,
                        group_size=args.group_size, cost_weight=args.cost_weight,
                        advantage_std_floor=args.advantage_std_floor)
    trainer = GRPOTrainer(before, train, config, args.out / "train")
    trainer.resume()
    trainer.train()
    policy = f"neural:{args.out / 'train' / 'policy.pt'}"
    figures = {}
    for label, registry in (("before", before), ("after", full)):
        run = evaluate(registry, [args.tasks], [policy, "oracle"], predictions_dir=args.out / label / "predictions")
        results = write_report(run, args.out / label)
        figures[label] = {p: results["policies"][p]["accuracy_by_domain"] for p in results["policies"]}
    print(json.dumps({"held_out": {"models": sorted(held_models), "skills": sorted(held_skills)}, **figures},
                     indent=2))


if __name__ == "__main__":
    main()
