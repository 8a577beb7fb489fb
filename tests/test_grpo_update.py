"""The neural GRPO trainer's update, by its properties rather than by a recorded number: a positive advantage raises
its action's probability (a negative one lowers it), the clip bounds how far the ratio can pull, a group whose
rewards do not differ gives no gradient. Each runs the trainer's own update (`NeuralGRPOTrainer.update`: the policy
re-scores the recorded action, `policy_loss`, Adam) on a decision of a real registry; a loss whose sign is flipped
fails the first property, so the sign of the update is tested, not only that weights move."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import real_tasks

from maestro_graph.policy.base import ActionSpace, EpisodeView
from maestro_graph.registry import Registry
from maestro_graph.training.rl import grpo
from maestro_graph.training.rl.grpo import (
    Group,
    NeuralGRPOConfig,
    NeuralGRPOTrainer,
    Sample,
    clipped_objective,
    group_advantages,
    policy_loss,
)
from maestro_graph.types import Action

ROOT = Path(__file__).resolve().parents[1]
VIEW = EpisodeView("How many circles are in the image?", (str(ROOT / "examples" / "circles.png"),), None, (), 4, 10.0)
EPSILON = 0.2


def _trainer(registry: Registry, folder: Path) -> NeuralGRPOTrainer:
    """A fresh trainer with one pass per update and no entropy bonus, so the advantage alone moves the weights."""
    config = NeuralGRPOConfig(hidden=16, seed=0, entropy_coef=0.0, num_iterations=1, epsilon=EPSILON)
    return NeuralGRPOTrainer(registry, real_tasks("barcode")[:1], config, folder)


def _probabilities(trainer: NeuralGRPOTrainer, registry: Registry) -> dict[Action, float]:
    dist = trainer.policy.distribution(VIEW, ActionSpace.build(registry, VIEW))
    return dict(zip(dist.actions, dist.probs.tolist()))


def _middle_action(probabilities: dict[Action, float]) -> Action:
    """An action neither near certain nor negligible, whose probability an update visibly moves."""
    ranked = sorted(probabilities, key=probabilities.get)
    return ranked[len(ranked) // 2]


def _update(trainer: NeuralGRPOTrainer, registry: Registry, samples: list[Sample]) -> None:
    trainer.update([Group(registry, samples)])


def _weights(trainer: NeuralGRPOTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.net.state_dict().items()}


def _check_the_advantage_sets_the_direction(registry: Registry, folder: Path) -> None:
    for sign in (1.0, -1.0):
        trainer = _trainer(registry, folder / str(sign))
        before = _probabilities(trainer, registry)
        action = _middle_action(before)
        _update(trainer, registry, [Sample(VIEW, action, math.log(before[action]), sign, 0)])
        after = _probabilities(trainer, registry)[action]
        assert (after - before[action]) * sign > 0, (sign, before[action], after)


def test_a_positive_advantage_raises_its_actions_probability_and_a_negative_one_lowers_it(registry, tmp_path):
    _check_the_advantage_sets_the_direction(registry, tmp_path)


def test_a_flipped_loss_fails_the_direction_property(registry, tmp_path, monkeypatch):
    """The test of the test: the trainer with the loss's sign flipped must not pass."""
    monkeypatch.setattr(grpo, "policy_loss", lambda *args, **kwargs: -policy_loss(*args, **kwargs))
    with pytest.raises(AssertionError):
        _check_the_advantage_sets_the_direction(registry, tmp_path)


def test_the_clip_bounds_the_ratio():
    """The objective never credits a ratio beyond 1 + epsilon for a good action (1 - epsilon for a bad one), and
    there it has no gradient; inside the band it follows the ratio."""
    ratios = torch.linspace(0.2, 3.0, 57)
    for advantage in (2.0, -2.0):
        log_probs = torch.log(ratios).requires_grad_()
        objective = clipped_objective(log_probs, torch.zeros(57), torch.full((57,), advantage), EPSILON)
        objective.sum().backward()
        assert bool((objective <= max((1 + EPSILON) * advantage, (1 - EPSILON) * advantage) + 1e-6).all())
        pulled = ratios > 1 + EPSILON if advantage > 0 else ratios < 1 - EPSILON
        assert bool((log_probs.grad[pulled] == 0).all()) and bool((log_probs.grad[~pulled] != 0).all())


def test_an_update_past_the_clip_leaves_the_weights_alone(registry, tmp_path):
    """A decision whose probability already moved epsilon past its sampling one, in its advantage's direction, adds
    nothing: the trainer's weights stay as they were; at ratio 1 the same decision moves them."""
    for advantage, moved in ((1.0, 1.5), (-1.0, 1 / 1.5)):
        trainer = _trainer(registry, tmp_path / str(advantage))
        probabilities = _probabilities(trainer, registry)
        action = _middle_action(probabilities)
        start = _weights(trainer)
        sampled_with = math.log(probabilities[action]) - math.log(moved)  # the ratio now is `moved`
        _update(trainer, registry, [Sample(VIEW, action, sampled_with, advantage, 0)])
        assert all(torch.equal(start[k], v) for k, v in _weights(trainer).items())
        _update(trainer, registry, [Sample(VIEW, action, math.log(probabilities[action]), advantage, 0)])
        assert not all(torch.equal(start[k], v) for k, v in _weights(trainer).items())


def test_a_group_with_no_reward_variance_gives_no_gradient(registry, tmp_path):
    trainer = _trainer(registry, tmp_path)
    probabilities = _probabilities(trainer, registry)
    actions = sorted(probabilities, key=probabilities.get)[-4:]
    for rewards, flat in ((np.full(4, 0.7), True), (np.array([1.0, 0.0, 0.7, 0.0]), False)):
        advantages = group_advantages(rewards, std_floor=0.5)
        start = _weights(trainer)
        _update(trainer, registry, [Sample(VIEW, a, math.log(probabilities[a]), float(adv), 0)
                                    for a, adv in zip(actions, advantages)])
        gradients = [p.grad for p in trainer.policy.net.parameters() if p.grad is not None]
        assert gradients and all(bool((g == 0).all()) for g in gradients) == flat
        assert all(torch.equal(start[k], v) for k, v in _weights(trainer).items()) == flat
