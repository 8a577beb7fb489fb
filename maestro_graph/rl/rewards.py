"""Rewards are plain callables `(task, episode) -> float`, logged by name (the TRL convention)."""

from __future__ import annotations

from typing import Callable

from ..runner import EpisodeResult
from ..tasks import Task

__all__ = ["RewardFn", "answer_score", "cost_penalty", "format_penalty", "total_reward", "lm_reward"]

RewardFn = Callable[[Task, EpisodeResult], float]
"""A reward: one float per finished episode."""


def answer_score(task: Task, episode: EpisodeResult) -> float:
    return task.score(episode.answer)


def cost_penalty(task: Task, episode: EpisodeResult) -> float:
    return -episode.cost


def total_reward(task: Task, episode: EpisodeResult, cost_weight: float) -> float:
    """The outcome reward of DESIGN.md: answer score minus `cost_weight` times the episode's cost."""
    return answer_score(task, episode) + cost_weight * cost_penalty(task, episode)


def format_penalty(task: Task, episode: EpisodeResult) -> float:
    """For LM routers: minus the number of outputs that were no valid action (error steps of kind "policy":
    malformed tags, unknown or incompatible pairs) and minus one when the budget, not the router, ended the episode."""
    invalid = sum(1 for s in episode.steps if s.error_kind == "policy")
    return -float(invalid + (episode.stop_reason == "budget"))


def lm_reward(task: Task, episode: EpisodeResult, cost_weight: float, format_weight: float) -> float:
    """The LM router's reward: outcome minus cost minus `format_weight` per format error."""
    return total_reward(task, episode, cost_weight) + format_weight * format_penalty(task, episode)
