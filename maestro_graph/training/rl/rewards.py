"""The reward, defined once: named episode-level reward functions and their weights, in the shape of TRL's
`reward_funcs` + `reward_weights`. The neural GRPO trainer, TRL training of LM routers and trajectory export all
compute an episode's reward through `Rewards`, and log each part by its name.

    reward = 1 * outcome + cost_weight * cost + format_weight * format [+ call_weight * turns]

`outcome` is the answer score (0..1), `cost` minus the episode's expert cost, `format` minus the number of outputs
that were no valid action (LM routers; 0 for the neural policy, whose actions are always valid), `turns` minus the
number of expert calls (a part only when its weight is set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.tasks import Task
from ...episode.runner import EpisodeResult
from ...types import ErrorKind, StopReason

__all__ = ["METRICS", "RewardFunc", "Rewards", "calls", "cost", "format_errors", "outcome", "turns", "valid_actions"]

RewardFunc = Callable[[Task, EpisodeResult], float]
"""One reward part: a float per finished episode of a task (the function's name is the part's name)."""


def outcome(task: Task, episode: EpisodeResult) -> float:
    """The answer's score against the task's key (0 for a task without one)."""
    return task.score(episode.answer) if task.answer is not None else 0.0


def cost(task: Task, episode: EpisodeResult) -> float:
    """Minus the episode's expert cost."""
    return -episode.cost


def format_errors(task: Task, episode: EpisodeResult) -> float:
    """Minus the router's outputs that were no valid action (error steps of kind policy: malformed tags, unknown or
    incompatible pairs), and minus one when the budget, not the router, ended the episode: the turns were spent and
    the router still asked for a call or wrote no action, so the graph answered for it (the decision it overruled
    has no log-probability). An episode whose router used every turn and then answered is no error: charging it
    would reward calling once at most, whatever the question needs."""
    invalid = sum(1 for s in episode.steps if s.error_kind == ErrorKind.POLICY)
    last = episode.decisions[-1] if episode.decisions else None
    overruled = last is not None and last.log_prob is None and not last.forced
    return -float(invalid + (episode.stop == StopReason.BUDGET and overruled))


def turns(task: Task, episode: EpisodeResult) -> float:
    """Minus the episode's expert calls: each takes a turn and a wait whatever its price (a skill that declines
    costs nothing), so a weight on it makes stopping once an answer is trusted worth something."""
    return -float(len(episode.steps))


def valid_actions(task: Task, episode: EpisodeResult) -> float:
    """The share of the router's decisions that were valid actions (a metric: TRL training logs it with weight 0)."""
    decisions = [d for d in episode.decisions if not d.forced]
    return 1.0 - sum(d.kind == "invalid" for d in decisions) / len(decisions) if decisions else 1.0


def calls(task: Task, episode: EpisodeResult) -> float:
    """Expert calls in the episode (a metric, weight 0)."""
    return float(len(episode.steps))


METRICS: tuple[RewardFunc, ...] = (valid_actions, calls)
"""Logged beside the reward parts with weight zero (verifiers' habit: a metric is a reward that does not count)."""


@dataclass(frozen=True)
class Rewards:
    """Reward parts with their weights. `parts` gives each part by name, `total` their weighted sum."""

    funcs: tuple[RewardFunc, ...] = (outcome, cost, format_errors)
    weights: tuple[float, ...] = (1.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if len(self.funcs) != len(self.weights):
            raise ValueError(f"{len(self.funcs)} reward functions but {len(self.weights)} weights")

    @classmethod
    def make(cls, *, cost_weight: float = 0.0, format_weight: float = 0.0, call_weight: float = 0.0) -> Rewards:
        """The project's reward: outcome, minus `cost_weight` per unit of cost, minus `format_weight` per format
        error, minus `call_weight` per call (the `turns` part, present only with a weight)."""
        funcs: tuple[RewardFunc, ...] = (outcome, cost, format_errors)
        weights: tuple[float, ...] = (1.0, cost_weight, format_weight)
        if call_weight:
            funcs, weights = (*funcs, turns), (*weights, call_weight)
        return cls(funcs, weights)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.__name__ for f in self.funcs)

    def parts(self, task: Task, episode: EpisodeResult) -> dict[str, float]:
        return {f.__name__: float(f(task, episode)) for f in self.funcs}

    def total(self, parts: dict[str, float]) -> float:
        return sum(w * parts[name] for name, w in zip(self.names, self.weights))

    def __call__(self, task: Task, episode: EpisodeResult) -> float:
        return self.total(self.parts(task, episode))

    def with_metrics(self) -> Rewards:
        """These rewards plus `METRICS` at weight zero: logged per step, no part of the training signal."""
        return Rewards((*self.funcs, *METRICS), (*self.weights, *(0.0 for _ in METRICS)))

    def trl_funcs(self) -> list[Callable[..., list[float]]]:
        """TRL reward functions reading the parts a rollout function returned (one column `reward_<name>` per part),
        so TRL weights and logs each part under its own name."""
        def column(name: str) -> Callable[..., list[float]]:
            def reward(completions: list, **columns: Any) -> list[float]:
                return [float(v) for v in columns[f"reward_{name}"]]

            reward.__name__ = name
            return reward

        return [column(name) for name in self.names]
