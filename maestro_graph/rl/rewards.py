"""Rewards are plain callables `(task, episode) -> float`, logged by name (the TRL convention)."""

from __future__ import annotations

from typing import Callable

from ..runner import EpisodeResult
from ..scoring import score
from ..tasks import Task

__all__ = ["RewardFn", "answer_score", "cost_penalty", "total_reward"]

RewardFn = Callable[[Task, EpisodeResult], float]
"""A reward: one float per finished episode."""


def answer_score(task: Task, episode: EpisodeResult) -> float:
    return score(episode.answer, task.answer or "", task.answer_type, tolerance=task.tolerance, choices=task.choices)


def cost_penalty(task: Task, episode: EpisodeResult) -> float:
    return -episode.cost


def total_reward(task: Task, episode: EpisodeResult, cost_weight: float) -> float:
    """The outcome reward of DESIGN.md: answer score minus `cost_weight` times the episode's cost."""
    return answer_score(task, episode) + cost_weight * cost_penalty(task, episode)
