"""Running every pair of a registry on every item of a task file: the measurement behind a registry's profile and
reach (`maestro registry profile`), the `best-single`/`knn`/`classifier` routers' table and the warm start's views.
The expert cache makes a second measurement free."""

from __future__ import annotations

from functools import partial

import numpy as np
from tqdm import tqdm

from ..core.tasks import Task
from ..registry import Registry
from ..registry.outcomes import PairOutcomes
from ..types import Invoke, Step, split_pair
from .executors import Executor, ThreadExecutor

__all__ = ["measure_pairs", "measure_steps"]


def _pair_steps(pairs: list[str], registry: Registry, task: Task) -> dict[str, Step]:
    """Every pair's step on one task, as the graph's skill node runs it (an executor job: module-level, so Ray
    workers can run it)."""
    return {pair: registry.run(Invoke(*split_pair(pair)), question=task.question, images=task.images,
                               choices=task.options) for pair in pairs}


def measure_steps(registry: Registry, tasks: list[Task], *, workers: int = 2, progress: bool = True,
                  executor: Executor | None = None) -> list[dict[str, Step]]:
    """Every available pair's step on every task, concurrently over tasks on `executor` (default: `workers`
    threads; per-model limits still apply): what `measure_pairs` scores, and what the warm start builds its views
    from."""
    rows: list[dict[str, Step]] = [{} for _ in tasks]
    runs = (executor or ThreadExecutor(registry, workers)).map_unordered(
        partial(_pair_steps, registry.pair_ids()), tasks)
    for i, row in tqdm(runs, total=len(tasks), desc="measuring pairs", unit="item", disable=not progress):
        rows[i] = row
    return rows


def measure_pairs(registry: Registry, tasks: list[Task], *, workers: int = 2, progress: bool = True,
                  executor: Executor | None = None) -> PairOutcomes:
    """Every available pair's score and cost on every task (`measure_steps`)."""
    pairs = registry.pair_ids()
    steps = measure_steps(registry, tasks, workers=workers, progress=progress, executor=executor)
    shape = (len(tasks), len(pairs))
    return PairOutcomes(
        task_ids=[t.id for t in tasks],
        questions=[t.question for t in tasks],
        images=[list(t.images) for t in tasks],
        choices=[t.options for t in tasks],
        sources=[t.source or "unknown" for t in tasks],
        pairs=pairs,
        scores=np.asarray([[t.score(row[p].answer) for p in pairs] for t, row in zip(tasks, steps)],
                          dtype=np.float32).reshape(shape),
        costs=np.asarray([[row[p].cost for p in pairs] for row in steps], dtype=np.float32).reshape(shape),
    )
