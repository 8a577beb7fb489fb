#!/usr/bin/env python
"""Every pair on every item of a task file: per source, the best single pair, its accuracy, and the oracle
(does any pair get the item right). Writes the pair outcomes as JSON for later use (best-single/knn/classifier).

    .venv/bin/python scripts/pair_table.py --tasks $DEV/train.jsonl --out runs/pairs.json

($DEV: a folder of task files, docs/evaluation.md "The real dev items".)

It also prints a ceiling for routers that send every item of a source (of a domain, within a mixed source such as
the procedural suite) to one pair: that pair chosen in hindsight on these very items. A policy above it must tell
items of one source apart; the oracle, right when any pair is, sits above both.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from maestro_graph.batch.measure import measure_pairs
from maestro_graph.cache.store import ExpertCache  # noqa: E402
from maestro_graph.core.tasks import (
    Task,  # noqa: E402
    load_task_files,  # noqa: E402
)
from maestro_graph.registry import Registry  # noqa: E402
from maestro_graph.registry.outcomes import PairOutcomes  # noqa: E402


def one_pair_per_group(tasks: list[Task], outcomes: PairOutcomes) -> float:
    """Macro accuracy (over sources) of sending each (source, domain) group to its best pair on these items."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, task in enumerate(tasks):
        groups[(outcomes.sources[i], task.domain)].append(i)
    per_item = np.empty(len(tasks))
    for rows in groups.values():
        per_item[rows] = outcomes.scores[rows][:, int(np.argmax(outcomes.scores[rows].mean(axis=0)))]
    sources = np.asarray(outcomes.sources)
    return float(np.mean([per_item[sources == s].mean() for s in sorted(set(outcomes.sources))]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", required=True, type=Path, action="append", help="task file (repeat)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--registry", default=None)
    parser.add_argument("--skip-model", action="append", default=[], help="leave a model out (repeat)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-dir", default=".maestro-cache")
    args = parser.parse_args()
    registry = Registry.load(args.registry, cache=ExpertCache(args.cache_dir)).without(models=set(args.skip_model))
    tasks, problems = load_task_files(args.tasks)
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
    oracle = np.mean([row.oracle_accuracy for row in outcomes.by_source()])
    print(f"one pair per source and domain, chosen on these items: macro {one_pair_per_group(tasks, outcomes):.3f}; "
          f"oracle macro {oracle:.3f}")


if __name__ == "__main__":
    main()
