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
from maestro_graph.configs import add_arguments, from_arguments  # noqa: E402
from maestro_graph.tasks import load_task_files  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.rl.config import GRPOConfig  # noqa: E402
from maestro_graph.rl.experiments import evaluate_into, train_resumable  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--capability", default="barcode", help="capability whose models and skills are held out")
    parser.add_argument("--registry", default=None)
    parser.add_argument("--cache-dir", default=".maestro-cache")
    add_arguments(parser, GRPOConfig)  # every training setting, with its help and default, from the one config
    args = parser.parse_args()
    torch.set_num_threads(1)
    full = Registry.load(args.registry, cache=ExpertCache(args.cache_dir))
    held_models = {name for name, h in full.models.items() if args.capability in h.card.capabilities}
    held_skills = {s.name for s in full.skills.values() if args.capability in s.requires}
    before = full.without(models=held_models, skills=held_skills)
    train, _ = load_task_files([args.train])
    # no task of the held-out kind: items the full registry can only solve with the held-out skills are dropped
    train = [t for t in train if t.domain != args.capability]
    config = from_arguments(GRPOConfig, args)
    policy = train_resumable(before, train, config, args.out / "train")
    figures = {}
    for label, registry in (("before", before), ("after", full)):
        results = evaluate_into(args.out / label, registry, [args.tasks], [policy, "oracle"])
        figures[label] = {p: results["policies"][p]["accuracy_by_domain"] for p in results["policies"]}
    print(json.dumps({"held_out": {"models": sorted(held_models), "skills": sorted(held_skills)}, **figures},
                     indent=2))


if __name__ == "__main__":
    main()
