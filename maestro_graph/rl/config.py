"""The neural policy's GRPO settings, apart from the trainer (TRL's config-dataclass style) and light to import, so
`maestro train --help` builds its options from these fields without loading torch."""

from __future__ import annotations

from dataclasses import dataclass

from ..configs import setting
from ..errors import ConfigError

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig:
    """Settings of one training run. Defaults train the shipped policy in minutes on 2 CPU cores (warm cache)."""

    steps: int = setting(60, "Optimiser steps; each samples tasks_per_step tasks and group_size episodes per task.")
    tasks_per_step: int = setting(16, "Tasks sampled per step.")
    group_size: int = setting(8, "G, the episodes sampled per task; their rewards are normalised within the group.")
    lr: float = setting(3e-3, "Adam learning rate.")
    clip: float = setting(0.2, "PPO-style ratio clip epsilon.")
    entropy_coef: float = setting(0.01, "Weight of the entropy bonus.")
    inner_epochs: int = setting(2, "Gradient passes over each step's rollouts (the clip matters from the second on).")
    cost_weight: float = setting(0.0, "Reward = answer score - cost_weight * episode cost.")
    call_weight: float = setting(
        0.0, "Reward also minus call_weight per expert call: a price per turn beyond its cost (a skill that "
        "declines costs nothing but takes a turn and time), so stopping once an answer is trusted, or where no "
        "pair fits, is worth something (0: no such part).")
    advantage_std_floor: float = setting(
        0.0, "Advantages are divided by max(group std, this). With a cost weight, a group whose episodes are all "
        "right differs only by cost, and dividing by its tiny std turns any weight into a full-strength 'call less' "
        "signal; a floor keeps such groups' advantages at the reward scale (0: plain GRPO).")
    warm_start_steps: int = setting(
        0, "Steps of the full-information warm start before GRPO (rl.warm_start): every pair is run once on every "
        "training item (free with a warm expert cache), each action of the first two decisions is valued from those "
        "outcomes, and each step trains the decisions of tasks_per_step items toward their best actions, all "
        "actions at once (0: GRPO from the initial weights).")
    max_turns: int = setting(4, "Turn budget of each episode.")
    max_cost: float = setting(10.0, "Cost budget of each episode.")
    revisit_weight: float = setting(
        0.25, "Sampling weight of a task whose last group scored all the same (no signal: every pair fails it, or "
        "the policy already solves it every time), against 1 for the others; revisited now and then, not dropped.")
    registry_dropout: float = setting(0.15, "Probability of leaving each model and each tier-1 skill out of a "
                                      "group's registry.")
    family_dropout: float = setting(
        0.0, "Probability of leaving each family out of a group's registry whole: a model with the tier-1 skills "
        "only it can run, or a skill with the models only it uses (rl.cards.families), so that the policy meets "
        "registries missing a kind of expertise, as one added after training is missing from the training registry "
        "(0: no family is hidden, the stream of draws of earlier runs).")
    profile_dropout: float = setting(
        0.25, "Probability of hiding each profiled pair's profile (its measured family accuracy, `maestro registry "
        "profile`) from a group's registry, so the policy learns both to use a profile and to do without one. "
        "Nothing is hidden, or drawn, when the registry has no profile.")
    paraphrase_prob: float = setting(0.5, "Probability of replacing each card text by a paraphrase within a group.")
    hidden: int = setting(128, "Width of the policy's state and card encodings.")
    stop_without_answer: bool = setting(
        False, "Let the policy stop after a call although no step has answered (the graph then guesses among "
        "options, or answers nothing), instead of calling on until the budget ends (NeuralConfig).")
    seed: int = setting(0, "Seed of every random choice of the run (a resumed run repeats them).")
    checkpoint_every: int = setting(10, "Steps between checkpoints (and validations, with eval tasks).")
    ema_decay: float = setting(
        0.98, "policy.safetensors holds an exponential moving average of the weights over the steps (0: the last "
        "step's weights): steadier than any one step's, whose noisy updates rest on a few informative groups.")

    def __post_init__(self) -> None:
        checks = [
            (self.steps >= 1, "steps", "must be at least 1"),
            (self.warm_start_steps >= 0, "warm_start_steps", "must be >= 0 (0: no warm start)"),
            (self.group_size >= 2, "group_size", "must be at least 2: advantages are relative within a group"),
            (self.tasks_per_step >= 1, "tasks_per_step", "must be at least 1"),
            (0 < self.clip < 1, "clip", "must be in (0, 1), typically 0.2"),
            (self.lr > 0, "lr", "must be positive"),
            (self.cost_weight >= 0, "cost_weight", "must be >= 0 (0 ignores cost)"),
            (self.call_weight >= 0, "call_weight", "must be >= 0 (0: calls are priced by their cost only)"),
            (self.advantage_std_floor >= 0, "advantage_std_floor", "must be >= 0 (0: divide by the group's std)"),
            (0 <= self.registry_dropout < 1, "registry_dropout", "must be in [0, 1)"),
            (0 <= self.family_dropout < 1, "family_dropout", "must be in [0, 1)"),
            (0 <= self.profile_dropout <= 1, "profile_dropout", "must be in [0, 1]"),
            (0 <= self.paraphrase_prob <= 1, "paraphrase_prob", "must be in [0, 1]"),
            (0 < self.revisit_weight <= 1, "revisit_weight", "must be in (0, 1]; 1 samples tasks uniformly"),
            (self.max_turns >= 1, "max_turns", "must be at least 1"),
            (0 <= self.ema_decay < 1, "ema_decay", "must be in [0, 1); 0 keeps the last weights"),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} {why}", field=name)
