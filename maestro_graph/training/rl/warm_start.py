"""A full-information warm start for the neural policy, before GRPO: on a training item every pair's outcome can be
measured (the expert cache keeps it, and `knn`/`classifier` are fitted on exactly that), so a decision need not
learn from the one action an episode happened to sample. The first two decisions form a small tree whose every leaf
is valued from the measured steps, and the policy is trained toward the best action at each decision of it:

- first decision: call pair j (charged as the reward charges a call: `cost_weight` x its cost + `call_weight`);
- after pair j: answer a candidate (or nothing, where the policy may give up), worth that ending's score; or call
  pair k, worth the score of the answer the two steps then support (`best_candidate`) minus k's charge.

The first decision's target is the call whose best continuation is worth most; each decision after j weighs by the
policy's own probability of calling j first, so "stop or go on" is learnt where the policy actually goes, not
after every pair alike (after an unrelated pair going on is always right). Every ending is scored through the
graph's final-answer rule (`episode.answer.final_answer`: a marked guess among the options of a choice question,
"no" for a yes/no question left without an answer), so a value is what the episode would score.
Where no pair helps, every further call is worth less than answering, so the policy learns to stop after one call
instead of wandering through unrelated pairs. The sampled items see the same registry dropout and card paraphrases
as GRPO's groups, so values attach to card words, not to names. GRPO then trains the later decisions and the
answer choice through the graph."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from ...batch.executors import Executor
from ...batch.measure import measure_steps
from ...core.tasks import Task
from ...episode.answer import final_answer
from ...policy.base import ActionSpace, EpisodeView, best_candidate
from ...policy.neural import NeuralPolicy
from ...registry import Registry
from ...types import Action, Answer, Invoke, Step, split_pair
from .augment import sample_view
from .config import NeuralGRPOConfig

__all__ = ["TEMPERATURE", "ValuedDecision", "ValuedTree", "valued_tree", "warm_start"]

TEMPERATURE = 0.01
"""Of the targets' soft argmax over action values: a call priced 0.05 below the best action gets e^-5 of its mass."""


@dataclass(frozen=True)
class ValuedDecision:
    """One decision of the warm start: what the policy sees, the registry it sees it through, and every valid
    action's value."""

    view: EpisodeView
    registry: Registry
    values: dict[Action, float]


def _ending(task: Task, steps: list[Step], answer: str | None) -> float:
    """The score of an episode that answers `answer` after `steps`, through the graph's own final-answer rule (the
    marked guess among options or for yes/no included)."""
    final, _ = final_answer(task.question, task.options, answer, steps)
    return task.score(final)


@dataclass(frozen=True)
class ValuedTree:
    """The first decision of one item and, for each pair it may call, the decision after that call (None when the
    budget is then spent): `first.values[j]` is calling j and then answering at once."""

    first: ValuedDecision
    after: dict[Action, ValuedDecision | None]
    call_cost: dict[Action, float]
    """What each call is charged in the reward: cost_weight x its cost + call_weight."""


def valued_tree(task: Task, steps: dict[str, Step], registry: Registry, config: NeuralGRPOConfig) -> ValuedTree:
    """The item's first two decisions with every leaf valued (see the module docstring)."""
    available = [p for p in registry.pair_ids() if p in steps]
    calls = {p: Invoke(*split_pair(p)) for p in available}
    cost: dict[Action, float] = {calls[p]: config.cost_weight * steps[p].cost + config.call_weight for p in available}
    first = ValuedDecision(EpisodeView.of_task(task, (), config.max_turns, config.max_cost), registry, {
        calls[p]: _ending(task, [steps[p]], best_candidate([steps[p]])) - cost[calls[p]] for p in available})
    after: dict[Action, ValuedDecision | None] = {}
    for p in available:
        view = EpisodeView.of_task(task, (steps[p],), config.max_turns, config.max_cost)
        if view.budget_spent:
            after[calls[p]] = None
            continue
        answers: Sequence[str | None] = view.candidates() or [None]  # none yet: answering nothing
        values: dict[Action, float] = {Answer(c): _ending(task, [steps[p]], c) for c in answers}
        for k in available:
            if k != p:
                both = [steps[p], steps[k]]
                values[calls[k]] = _ending(task, both, best_candidate(both)) - cost[calls[k]]
        after[calls[p]] = ValuedDecision(view, registry, values)
    return ValuedTree(first, after, cost)


def _scored(policy: NeuralPolicy, decision: ValuedDecision):
    return policy.score(decision.view, ActionSpace.build(decision.registry, decision.view))


def _targets(actions: tuple, values: dict[Action, float]) -> torch.Tensor:
    """Soft argmax of the actions' values at TEMPERATURE: the best actions share the mass (several right pairs),
    one a call's price below the best gets almost none."""
    v = torch.tensor([values.get(a, 0.0) for a in actions], dtype=torch.float32)
    return torch.softmax(v / TEMPERATURE, dim=0)


def _tree_loss(policy: NeuralPolicy, tree: ValuedTree) -> tuple[torch.Tensor, float, float]:
    """Cross-entropy of the policy's decisions against the tree's best actions: the first decision against the
    best call given the best move after it, each later one weighted by the policy's (detached) probability of
    reaching it. Also the policy's expected value over the tree and its probability of stopping after one call
    (for the log). Cross-entropy rather than the expected value itself: the latter's gradient vanishes once an
    action's probability is near 0, and an early collapse (going on looks best while the first call is still
    spread over unrelated pairs) then never recovers."""
    first = _scored(policy, tree.first)
    best_after = {a: max(d.values.values()) if d is not None and d.values else None for a, d in tree.after.items()}
    q_first = {a: (tree.first.values[a] if (best := best_after.get(a)) is None else best - tree.call_cost[a])
               for a in tree.first.values}
    loss = -(_targets(first.actions, q_first) * torch.log(first.probs)).sum()
    value, stop = 0.0, 0.0
    reach = first.probs.detach()
    for action, p_first in zip(first.actions, reach.tolist()):
        later = tree.after.get(action)
        if later is None:
            value += p_first * tree.first.values.get(action, 0.0)
            stop += p_first
            continue
        scored = _scored(policy, later)
        loss = loss - p_first * (_targets(scored.actions, later.values) * torch.log(scored.probs)).sum()
        probs = scored.probs.detach().tolist()
        value += p_first * (sum(q * later.values.get(a, 0.0) for a, q in zip(scored.actions, probs))
                            - tree.call_cost[action])
        stop += p_first * sum(q for a, q in zip(scored.actions, probs) if isinstance(a, Answer))
    return loss, value, stop


def warm_start(policy: NeuralPolicy, registry: Registry, tasks: list[Task], config: NeuralGRPOConfig,
               executor: Executor, progress: bool = True, log=None) -> list[dict]:
    """`config.warm_start_steps` Adam steps, each over `tasks_per_step` items drawn from (seed, step), with a
    dropout registry and card paraphrases drawn per item as GRPO draws them per group. Returns one record per step
    (the loss, the policy's mean expected value over the items' trees before the step, its probability of stopping
    after the first call); `log(record)` sees each."""
    measured = measure_steps(registry, tasks, progress=progress, executor=executor)
    optim = torch.optim.Adam(policy.net.parameters(), lr=config.learning_rate)
    history = []
    bar = tqdm(range(config.warm_start_steps), desc="warm start", unit="step", disable=not progress)
    for step in bar:
        rng = np.random.default_rng([config.seed, 1 << 20, step])  # apart from GRPO's (seed, step) streams
        picks = rng.choice(len(tasks), size=min(config.tasks_per_step, len(tasks)), replace=False)
        losses, values, stops = [], [], []
        for i in picks:
            view = sample_view(registry, rng, config).apply(registry)
            loss, value, stop = _tree_loss(policy, valued_tree(tasks[int(i)], measured[int(i)], view, config))
            losses.append(loss)
            values.append(value)
            stops.append(stop)
        loss = torch.stack(losses).mean()
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.net.parameters(), 1.0)
        optim.step()
        record = {"phase": "warm-start", "warm_step": step + 1, "loss": float(loss.detach()),
                  "value": float(np.mean(values)), "stop_after_one": float(np.mean(stops))}
        history.append(record)
        bar.set_postfix(value=f"{record['value']:.3f}", stop=f"{record['stop_after_one']:.2f}")
        if log:
            log(record)
    return history
