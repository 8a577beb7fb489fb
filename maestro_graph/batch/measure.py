"""Running every pair of a registry on every item of a task file: the measurement behind a registry's profile and
reach (`maestro registry profile`), the `best-single`/`knn`/`classifier` routers' table and the warm start's views.
The expert cache makes a second measurement free.

Pairs of a card served behind endpoints (an `openai` backend) are measured with as many calls at once as the card
allows (`concurrency` per endpoint): a served model is built to answer many requests together, and measuring it two
at a time would take hours. The other pairs run over the items on `workers` threads, each in-process expert held to
its own limit. A call that failed (the endpoint down, an HTTP error, a timeout, a malformed reply) is recorded as a
failure, not as a wrong answer (`registry.outcomes.failed_step`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
from tqdm import tqdm

from ..core.tasks import Task
from ..registry import Registry
from ..registry.config import OpenAIBackend
from ..registry.outcomes import PairOutcomes, failed_step
from ..types import Invoke, Step, split_pair
from .executors import Executor, ThreadExecutor

__all__ = ["measure_pairs", "measure_steps"]


def _pair_steps(pairs: list[str], registry: Registry, task: Task) -> dict[str, Step]:
    """Every pair's step on one task, as the graph's skill node runs it (an executor job: module-level, so Ray
    workers can run it)."""
    return {pair: registry.run(Invoke(*split_pair(pair)), question=task.question, images=task.images,
                               choices=task.options) for pair in pairs}


def _served_pairs(registry: Registry) -> dict[str, list[str]]:
    """The pairs of each card served behind endpoints, by card name."""
    served: dict[str, list[str]] = {}
    for pair in registry.pair_ids():
        model = split_pair(pair)[0]
        if isinstance(registry.models[model].card.backend, OpenAIBackend):
            served.setdefault(model, []).append(pair)
    return served


def measure_steps(registry: Registry, tasks: list[Task], *, workers: int = 2, progress: bool = True,
                  executor: Executor | None = None) -> list[dict[str, Step]]:
    """Every available pair's step on every task: concurrently over tasks on `executor` (default: `workers`
    threads; per-model limits still apply), and, without an executor, a served card's pairs with as many calls at
    once as the card's `concurrency` allows on all its endpoints. What `measure_pairs` scores, and what the warm start
    builds its views from."""
    served = _served_pairs(registry) if executor is None else {}
    local = [p for p in registry.pair_ids() if split_pair(p)[0] not in served]
    rows: list[dict[str, Step]] = [{} for _ in tasks]
    bar = tqdm(total=len(tasks) * len(registry.pair_ids()), desc="measuring pairs", unit="call", disable=not progress)
    runs = (executor or ThreadExecutor(registry, workers)).map_unordered(partial(_pair_steps, local), tasks)
    for i, row in runs:
        rows[i].update(row)
        bar.update(len(row))
    for model, pairs in served.items():
        handle = registry.models[model]
        jobs = [(i, pair) for i in range(len(tasks)) for pair in pairs]
        with ThreadPoolExecutor(max_workers=handle.card.concurrency * len(handle.urls),
                                thread_name_prefix=f"measure-{model}") as pool:
            steps = pool.map(lambda job: _pair_steps([job[1]], registry, tasks[job[0]]), jobs)
            for (i, _), step in zip(jobs, steps):
                rows[i].update(step)
                bar.update(1)
    bar.close()
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
        failures=[[failed_step(row[p]) for p in pairs] for row in steps],
    )
