#!/usr/bin/env python
"""Every pair on every item of a task file: per source, the best single pair, its accuracy, and the oracle
(does any pair get the item right). Writes the pair outcomes as JSON for later use (best-single/knn/classifier).

    .venv/bin/python scripts/pair_table.py --tasks ../shared/benchmarks/real-dev/tasks.jsonl --out runs/pairs.json
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from maestro_graph.cache import ExpertCache  # noqa: E402
from maestro_graph.evaluation.outcomes import measure_pairs  # noqa: E402
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.tasks import load_tasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--registry", default=None)
    parser.add_argument("--skip-model", action="append", default=[], help="leave a model out (repeat)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-dir", default=".maestro-cache")
    args = parser.parse_args()
    registry = Registry.load(args.registry, cache=ExpertCache(args.cache_dir)).without(models=set(args.skip_model))
    tasks, problems = load_tasks(args.tasks)
    outcomes = measure_pairs(registry, tasks, workers=args.workers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    outcomes.save(args.out)
    print(f"{len(tasks)} items ({len(problems)} skipped), {len(outcomes.pairs)} pairs; skipped models: {args.skip_model}")
    print("| source | items | best single pair | its accuracy | oracle (any pair right) |")
    print("|---|---|---|---|---|")
    for row in outcomes.by_source():
        print(f"| {row.source} | {row.items} | {row.best_pair} | {row.best_accuracy:.3f} | {row.oracle_accuracy:.3f} |")
    macro = outcomes.macro_accuracy()
    print(f"best single pair overall (macro over sources): {outcomes.best_single()} ({macro.max():.3f})")


if __name__ == "__main__":
    main()
