"""A full-information warm start for the neural policy, before GRPO: on a training item every pair's outcome can be
measured (the expert cache keeps it, and `knn`/`classifier` are fitted on exactly that), so a decision need not
learn from the one action an episode happened to sample. Each action of the first two decisions gets a value from
the measured steps, and the policy maximises its expected value over all of them at once:

- first decision: invoking pair j is worth the score of answering its answer minus `cost_weight` x its cost;
- after pair j: answering a candidate (or nothing, where the policy may give up) is worth that ending's score;
  invoking pair k is worth the score of the answer the episode would then give (`best_candidate` of the two steps)
  minus `cost_weight` x k's cost.

Every ending is scored through the graph's final-answer rule (`graph.final_answer`: a marked guess among the options
of a choice question, "no" for a yes/no question left without an answer), so a value is what the episode would
score.

Where no pair helps, every further call is worth less than answering, so the policy learns to stop after one call
instead of wandering through unrelated pairs. The sampled items see the same registry dropout and card paraphrases
as GRPO's groups, so values attach to card words, not to names. GRPO then trains the later decisions and the
answer choice through the graph."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from tqdm import tqdm

from ..executors import Executor
from ..graph import final_answer
from ..policy.base import ActionSpace, EpisodeView, best_candidate
from ..policy.neural import NeuralPolicy
from ..registry import Registry
from ..tasks import Task
from ..types import Action, Answer, Invoke, Step, split_pair
from .cards import sample_card_texts, sample_dropout
from .config import GRPOConfig

__all__ = ["ValuedDecision", "measure_steps", "valued_decisions", "warm_start"]


@dataclass(frozen=True)
class ValuedDecision:
    """One decision of the warm start: what the policy sees, the registry it sees it through, and every valid
    action's value."""

    view: EpisodeView
    registry: Registry
    values: dict[Action, float]


def _pair_steps(pairs: list[str], registry: Registry, task: Task) -> dict[str, Step]:
    """Every pair's step on one task, as the graph's skill node runs it (an executor job: module-level)."""
    return {pair: registry.run(Invoke(*split_pair(pair)), question=task.question, images=task.images,
                               choices=task.options) for pair in pairs}


def measure_steps(registry: Registry, tasks: list[Task], executor: Executor, progress: bool = True
                  ) -> list[dict[str, Step]]:
    """Every pair's step on every task (pair_outcomes.measure_pairs keeps only scores; the views need the steps)."""
    rows: list[dict[str, Step]] = [{} for _ in tasks]
    runs = executor.map_unordered(partial(_pair_steps, registry.pair_ids()), tasks)
    for i, row in tqdm(runs, total=len(tasks), desc="warm start: every pair on every item", unit="item",
                       disable=not progress):
        rows[i] = row
    return rows


def _ending(task: Task, steps: list[Step], answer: str | None) -> float:
    """The score of an episode that answers `answer` after `steps`, through the graph's own final-answer rule (the
    marked guess among options or for yes/no included)."""
    options = task.options
    final, _ = final_answer({"question": task.question, "choices": options, "answer": answer,
                             "steps": [s.model_dump() for s in steps]})
    return task.score(final)


def valued_decisions(task: Task, steps: dict[str, Step], registry: Registry, config: GRPOConfig
                     ) -> list[ValuedDecision]:
    """The first decision and the one after each available pair, each action valued (see the module docstring)."""
    available = [p for p in registry.pair_ids() if p in steps]
    first = ValuedDecision(EpisodeView.of_task(task, (), config.max_turns, config.max_cost), registry, {
        Invoke(*split_pair(p)): (_ending(task, [steps[p]], best_candidate([steps[p]]))
                                 - config.cost_weight * steps[p].cost)
        for p in available})
    decisions = [first]
    for p in available:
        view = EpisodeView.of_task(task, (steps[p],), config.max_turns, config.max_cost)
        if view.budget_spent:
            continue
        values: dict[Action, float] = {Answer(c): _ending(task, [steps[p]], c) for c in view.candidates() or [None]}
        for k in available:
            if k != p:
                both = [steps[p], steps[k]]
                values[Invoke(*split_pair(k))] = (_ending(task, both, best_candidate(both))
                                                  - config.cost_weight * steps[k].cost)
        decisions.append(ValuedDecision(view, registry, values))
    return decisions


def _expected(policy: NeuralPolicy, decision: ValuedDecision) -> tuple[torch.Tensor, torch.Tensor]:
    """The expected value of the policy's distribution at this decision, and its entropy."""
    scored = policy.score(decision.view, ActionSpace.build(decision.registry, decision.view))
    values = torch.tensor([decision.values.get(a, 0.0) for a in scored.actions], dtype=torch.float32)
    probs = scored.probs
    return (probs * values).sum(), -(probs * torch.log(probs)).sum()


def warm_start(policy: NeuralPolicy, registry: Registry, tasks: list[Task], config: GRPOConfig,
               executor: Executor, progress: bool = True, log=None) -> list[dict]:
    """`config.warm_start_steps` Adam steps, each over `tasks_per_step` items drawn from (seed, step), with a
    dropout registry and card paraphrases drawn per item as GRPO draws them per group. Returns one record per step
    (mean expected value of the first decision, of the later ones, and the loss); `log(record)` sees each."""
    measured = measure_steps(registry, tasks, executor, progress)
    optim = torch.optim.Adam(policy.net.parameters(), lr=config.lr)
    history = []
    bar = tqdm(range(config.warm_start_steps), desc="warm start", unit="step", disable=not progress)
    for step in bar:
        rng = np.random.default_rng([config.seed, 1 << 20, step])  # apart from GRPO's (seed, step) streams
        picks = rng.choice(len(tasks), size=min(config.tasks_per_step, len(tasks)), replace=False)
        first, later, entropies = [], [], []
        for i in picks:
            drop_models, drop_skills = sample_dropout(registry, rng, config.registry_dropout, config.family_dropout)
            dropped = registry.without(models=drop_models, skills=drop_skills)
            view = dropped.without(descriptions=sample_card_texts(dropped, rng, config.paraphrase_prob))
            for d, decision in enumerate(valued_decisions(tasks[int(i)], measured[int(i)], view, config)):
                value, entropy = _expected(policy, decision)
                (later if d else first).append(value)
                entropies.append(entropy)
        objective = torch.stack(first + later).mean() + config.entropy_coef * torch.stack(entropies).mean()
        optim.zero_grad()
        (-objective).backward()
        torch.nn.utils.clip_grad_norm_(policy.net.parameters(), 1.0)
        optim.step()
        with torch.no_grad():
            record = {"phase": "warm-start", "warm_step": step + 1, "loss": float(-objective),
                      "first_value": float(torch.stack(first).mean()),
                      "later_value": float(torch.stack(later).mean()) if later else 0.0}
        history.append(record)
        bar.set_postfix(first=f"{record['first_value']:.3f}", later=f"{record['later_value']:.3f}")
        if log:
            log(record)
    return history
