"""GRPO for the neural policy: groups of episodes sampled through the graph, rewards normalised within each group,
a clipped policy-gradient objective with an entropy bonus. The config is a dataclass apart from the trainer, as in
TRL; every decision is re-scored from the episode's steps, so rollouts need no hooks inside the graph."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..cache import file_digest
from ..errors import ConfigError
from ..graph import MaestroContext, build_graph
from ..policy.base import ActionSpace, EpisodeView
from ..policy.neural import NeuralConfig, NeuralPolicy
from ..registry import Registry
from ..runner import EpisodeResult, run_episode
from ..tasks import Task
from ..types import Action, Answer, Invoke
from .cards import sample_card_texts, sample_dropout
from .rewards import answer_score, total_reward

__all__ = ["GRPOConfig", "GRPOTrainer", "Decision", "group_advantages"]


@dataclass
class GRPOConfig:
    """Settings of one training run. Defaults train the shipped policy in minutes on 2 CPU cores (warm cache)."""

    steps: int = 60
    """Optimiser steps; each samples `tasks_per_step` tasks and `group_size` episodes per task."""
    tasks_per_step: int = 16
    group_size: int = 8
    """G, the episodes sampled per task; their rewards are normalised within the group."""
    lr: float = 3e-3
    clip: float = 0.2
    """PPO-style ratio clip epsilon."""
    entropy_coef: float = 0.01
    inner_epochs: int = 2
    """Gradient passes over each batch of rollouts (the clip matters from the second on)."""
    cost_weight: float = 0.0
    """Reward = answer score - cost_weight * episode cost."""
    advantage_std_floor: float = 0.0
    """Advantages are divided by max(group std, this). With a cost weight, a group whose episodes are all right
    differs only by cost, and dividing by its tiny std turns any weight into a full-strength "call less" signal;
    a floor keeps such groups' advantages at the reward scale (0: plain GRPO)."""
    max_turns: int = 4
    max_cost: float = 10.0
    revisit_weight: float = 0.25
    """Sampling weight of a task whose last group scored all the same (it gave no signal then: every pair fails it,
    or the policy already solves it every time), against 1 for the others; revisited now and then, not dropped."""
    registry_dropout: float = 0.15
    """Probability of leaving each model and each tier-1 skill out of a group's registry."""
    paraphrase_prob: float = 0.5
    """Probability of replacing each card text by a paraphrase within a group."""
    hidden: int = 128
    seed: int = 0
    checkpoint_every: int = 10
    ema_decay: float = 0.98
    """policy.pt holds an exponential moving average of the weights over the steps (0: the last step's weights):
    steadier than any one step's, whose noisy updates rest on a few informative groups."""

    def __post_init__(self) -> None:
        checks = [
            (self.steps >= 1, "steps", "must be at least 1"),
            (self.group_size >= 2, "group_size", "must be at least 2: advantages are relative within a group"),
            (self.tasks_per_step >= 1, "tasks_per_step", "must be at least 1"),
            (0 < self.clip < 1, "clip", "must be in (0, 1), typically 0.2"),
            (self.lr > 0, "lr", "must be positive"),
            (self.cost_weight >= 0, "cost_weight", "must be >= 0 (0 ignores cost)"),
            (self.advantage_std_floor >= 0, "advantage_std_floor", "must be >= 0 (0: divide by the group's std)"),
            (0 <= self.registry_dropout < 1, "registry_dropout", "must be in [0, 1)"),
            (0 <= self.paraphrase_prob <= 1, "paraphrase_prob", "must be in [0, 1]"),
            (0 < self.revisit_weight <= 1, "revisit_weight", "must be in (0, 1]; 1 samples tasks uniformly"),
            (self.max_turns >= 1, "max_turns", "must be at least 1"),
            (0 <= self.ema_decay < 1, "ema_decay", "must be in [0, 1); 0 keeps the last weights"),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} {why}", field=name)


_EXTENDABLE = {"steps", "checkpoint_every"}
"""Settings a resumed run may change (training longer does not change what was done so far)."""


@dataclass
class Decision:
    """One policy decision of a sampled episode, enough to re-score it under new weights."""

    view: EpisodeView
    action: Action
    old_log_prob: float
    advantage: float
    group: int


@dataclass
class _Group:
    registry: Registry
    card_text: dict[str, str]
    decisions: list[Decision] = field(default_factory=list)


def _decisions(episode: EpisodeResult, task: Task, context: MaestroContext) -> list[tuple[EpisodeView, Action]]:
    """The (view, action) pairs the policy chose in an episode, including the answer it picked once the budget was
    spent. A spent budget with a single candidate is no choice (the graph answers without asking): its
    log-probability is 0 and it has no gradient, but it still counts in the loss's mean."""
    out = []
    for t, step in enumerate(episode.steps):
        out.append((_view(task, episode.steps[:t], context), Invoke(step.model, step.skill, step.input)))
    if episode.stop_reason in ("policy", "budget"):
        out.append((_view(task, episode.steps, context), Answer(episode.answer)))
    return out


def group_advantages(rewards: np.ndarray, std_floor: float = 0.0) -> np.ndarray:
    """GRPO's advantages: rewards centred on the group's mean, divided by its std (or `std_floor` if larger)."""
    return (rewards - rewards.mean()) / (max(rewards.std(), std_floor) + 1e-6)


def _identity(task: Task) -> tuple:
    """The question and the images' content: the same item copied into another folder is still the same item."""
    return task.question, tuple(file_digest(ref) for ref in task.images)


def _view(task: Task, steps: list, context: MaestroContext) -> EpisodeView:
    return EpisodeView(task.question, tuple(task.images), tuple(task.choices) if task.choices else None,
                       tuple(steps), context.max_turns, context.max_cost)


def _index(actions: tuple, action: Action) -> int:
    for i, candidate in enumerate(actions):
        if candidate == action:
            return i
    raise ValueError(f"action {action} is not in the re-scored action set")


class GRPOTrainer:
    """Trains a NeuralPolicy on task files; writes checkpoints, a JSONL log and PNG curves under `out_dir`."""

    def __init__(self, registry: Registry, tasks: list[Task], config: GRPOConfig, out_dir: str | Path,
                 policy: NeuralPolicy | None = None, eval_tasks: list[Task] | None = None):
        if not tasks:
            raise ConfigError("no training tasks", field="tasks")
        self.registry = registry
        self.tasks = [t for t in tasks if t.answer is not None]
        self.eval_tasks = [t for t in eval_tasks or [] if t.answer is not None]
        """Validation items: at every checkpoint the averaged policy answers them greedily, and the best one so far
        is kept as best.pt (selected on these items, never on the ones a report evaluates)."""
        held_out = {_identity(t) for t in self.eval_tasks}
        shared = {_identity(t) for t in self.tasks} & held_out if held_out else set()
        if shared:
            raise ConfigError(f"{len(shared)} validation items are also training items (e.g. "
                              f"{sorted(shared)[0][0][:60]!r}): validate on items the policy is not trained on",
                              field="eval_tasks")
        self.best: dict | None = None
        """{"step", "score"} of best.pt: the highest validation score, macro accuracy - cost_weight * mean cost."""
        self.config = config
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.policy = policy or NeuralPolicy(NeuralConfig(hidden=config.hidden, seed=config.seed))
        self.optim = torch.optim.Adam(self.policy.net.parameters(), lr=config.lr)
        self.step = 0
        self.history: list[dict] = []
        self.weights = np.ones(len(self.tasks))
        """Per-task sampling weights (revisit_weight after a group without signal)."""
        self.average = {k: v.detach().clone() for k, v in self.policy.net.state_dict().items()}
        """The moving average of the weights (ema_decay) that policy.pt holds."""
        self.context = MaestroContext(max_turns=config.max_turns, max_cost=config.max_cost, greedy=False)

    # -- checkpoints -------------------------------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path:
        return self.out / "checkpoint.pt"

    def save(self) -> None:
        self.policy.save(self.checkpoint_path, extra={
            "trainer": {"step": self.step, "optim": self.optim.state_dict(), "history": self.history,
                        "config": asdict(self.config), "weights": self.weights.tolist(), "average": self.average,
                        "best": self.best}})
        self.averaged_policy().save(self.out / "policy.pt")

    def averaged_policy(self) -> NeuralPolicy:
        """The trained policy with the averaged weights (what policy.pt holds)."""
        policy = NeuralPolicy(self.policy.config)
        policy.net.load_state_dict(self.average)
        return policy

    def resume(self) -> bool:
        """Continue from the last checkpoint under `out_dir` when there is one (same config required)."""
        if not self.checkpoint_path.is_file():
            return False
        self.policy = NeuralPolicy.load(self.checkpoint_path)
        state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)["trainer"]
        mine = {k: v for k, v in asdict(self.config).items() if k not in _EXTENDABLE}
        theirs = {k: v for k, v in state["config"].items() if k not in _EXTENDABLE}
        if mine != theirs:
            differ = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise ConfigError(f"the checkpoint was trained with another config ({differ}); use a new --out or the "
                              "same settings", file=str(self.checkpoint_path), field="trainer.config")
        self.optim = torch.optim.Adam(self.policy.net.parameters(), lr=self.config.lr)
        self.optim.load_state_dict(state["optim"])
        self.step = state["step"]
        self.history = state["history"]
        if len(state["weights"]) != len(self.tasks):
            raise ConfigError(f"the checkpoint was trained on {len(state['weights'])} tasks, these files hold "
                              f"{len(self.tasks)}; use a new --out or the same task files",
                              file=str(self.checkpoint_path), field="trainer.weights")
        self.weights = np.asarray(state["weights"])
        self.average = state["average"]
        self.best = state.get("best")
        return True

    # -- validation --------------------------------------------------------------------------------------------------
    def validate(self) -> dict:
        """The averaged policy on the validation items, greedy, through the full registry (no dropout, the real card
        texts); best.pt follows the highest score. The figures join this step's history entry and log line."""
        from ..evaluation.evaluate import run_policy

        cfg = self.config
        policy = self.averaged_policy()
        context = MaestroContext(max_turns=cfg.max_turns, max_cost=cfg.max_cost)
        metrics = run_policy(self.registry, self.eval_tasks, policy, context=context).metrics()
        figures = {"val_macro": metrics["macro_accuracy"], "val_accuracy": metrics["accuracy"],
                   "val_cost": metrics["mean_cost"], "val_calls": metrics["calls_per_episode"],
                   "val_score": metrics["macro_accuracy"] - cfg.cost_weight * metrics["mean_cost"]}
        if self.best is None or figures["val_score"] > self.best["score"]:
            self.best = {"step": self.step, "score": figures["val_score"]}
            policy.save(self.out / "best.pt", extra={"validation": {"step": self.step, **figures}})
        if self.history:
            self.history[-1].update(figures)
        with (self.out / "train_log.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": self.step, **figures}) + "\n")
        return figures

    # -- one step ----------------------------------------------------------------------------------------------------
    def _rollouts(self) -> tuple[list[_Group], dict]:
        """Sample the step's groups. Every random choice derives from (seed, step), so a resumed run repeats it."""
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, self.step])
        picks = rng.choice(len(self.tasks), size=min(cfg.tasks_per_step, len(self.tasks)), replace=False,
                           p=self.weights / self.weights.sum())
        groups, rewards_all, scores_all, calls, costs = [], [], [], [], []
        skipped = 0
        for g_index, task_index in enumerate(picks):
            task = self.tasks[int(task_index)]
            drop_models, drop_skills = sample_dropout(self.registry, rng, cfg.registry_dropout)
            registry = self.registry.without(models=drop_models, skills=drop_skills)
            card_text = sample_card_texts(registry, rng, cfg.paraphrase_prob)
            self.policy.card_text = card_text
            graph = build_graph(registry, self.policy)
            episodes = []
            for g in range(cfg.group_size):
                context = MaestroContext(max_turns=cfg.max_turns, max_cost=cfg.max_cost, greedy=False,
                                         seed=int(rng.integers(2**31)) + g)
                episodes.append(run_episode(graph, task.question, task.images, task.choices, context=context))
            rewards = np.asarray([total_reward(task, e, cfg.cost_weight) for e in episodes])
            rewards_all += rewards.tolist()
            scores_all += [answer_score(task, e) for e in episodes]
            calls += [len(e.steps) for e in episodes]
            costs += [e.cost for e in episodes]
            std = rewards.std()
            self.weights[task_index] = cfg.revisit_weight if std < 1e-8 else 1.0
            if std < 1e-8:  # every episode scored the same: no signal, counted and left out
                skipped += 1
                continue
            advantages = group_advantages(rewards, cfg.advantage_std_floor)
            group = _Group(registry, card_text)
            for episode, adv in zip(episodes, advantages):
                for view, action in _decisions(episode, task, self.context):
                    group.decisions.append(Decision(view, action, 0.0, float(adv), g_index))
            groups.append(group)
        stats = {"reward": float(np.mean(rewards_all)), "accuracy": float(np.mean(scores_all)),
                 "calls": float(np.mean(calls)), "cost": float(np.mean(costs)), "skipped_groups": skipped,
                 "groups": len(picks)}
        return groups, stats

    def _score(self, group: _Group, decision: Decision) -> tuple[torch.Tensor, torch.Tensor]:
        self.policy.card_text = group.card_text
        scored = self.policy.score(decision.view, ActionSpace.build(group.registry, decision.view))
        probs = scored.probs
        log_prob = torch.log(probs[_index(scored.actions, decision.action)])
        entropy = -(probs * torch.log(probs)).sum()
        return log_prob, entropy

    def train_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        groups, stats = self._rollouts()
        decisions = [(g, d) for g in groups for d in g.decisions]
        with torch.no_grad():
            for group, d in decisions:
                d.old_log_prob = float(self._score(group, d)[0])
        entropies = []
        for _ in range(cfg.inner_epochs if decisions else 0):
            self.optim.zero_grad()
            losses = []
            for group, d in decisions:
                log_prob, entropy = self._score(group, d)
                ratio = torch.exp(log_prob - d.old_log_prob)
                surrogate = torch.min(ratio * d.advantage, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * d.advantage)
                losses.append(-surrogate - cfg.entropy_coef * entropy)
                entropies.append(float(entropy.detach()))
            torch.stack(losses).mean().backward()
            torch.nn.utils.clip_grad_norm_(self.policy.net.parameters(), 1.0)
            self.optim.step()
        with torch.no_grad():
            for key, value in self.policy.net.state_dict().items():
                self.average[key].mul_(cfg.ema_decay).add_(value, alpha=1 - cfg.ema_decay)
        self.policy.card_text = {}
        self.step += 1
        stats.update(step=self.step, entropy=float(np.mean(entropies)) if entropies else 0.0,
                     decisions=len(decisions), seconds=time.perf_counter() - start)
        self.history.append(stats)
        with (self.out / "train_log.jsonl").open("a") as fh:
            fh.write(json.dumps(stats) + "\n")
        return stats

    def train(self, progress: bool = True) -> NeuralPolicy:
        random.seed(self.config.seed)
        torch.manual_seed(self.config.seed + self.step)
        bar = tqdm(total=self.config.steps, initial=self.step, desc="GRPO", unit="step", disable=not progress)
        while self.step < self.config.steps:
            stats = self.train_step()
            bar.set_postfix(reward=f"{stats['reward']:.3f}", acc=f"{stats['accuracy']:.3f}",
                            calls=f"{stats['calls']:.2f}", ent=f"{stats['entropy']:.2f}")
            bar.update()
            if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                if self.eval_tasks:
                    self.validate()
                self.save()
                plot_curves(self.history, self.out / "curves.png")
        bar.close()
        return self.averaged_policy()


def plot_curves(history: list[dict], path: Path) -> None:
    """Reward, accuracy, calls per episode, cost and entropy against the step (and the validation figures)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["reward", "accuracy", "calls", "cost", "entropy"]
    validated = [h for h in history if "val_score" in h]
    fig, axes = plt.subplots(1, len(keys) + bool(validated), figsize=(3.2 * (len(keys) + bool(validated)), 2.8))
    if validated:
        axes[-1].plot([h["step"] for h in validated], [h["val_macro"] for h in validated], "o-", label="macro acc")
        axes[-1].plot([h["step"] for h in validated], [h["val_score"] for h in validated], "o--", label="score")
        axes[-1].set_title("validation")
        axes[-1].set_xlabel("step")
        axes[-1].legend(fontsize=7)
    steps = [h["step"] for h in history]
    for ax, key in zip(axes, keys):
        values = [h[key] for h in history]
        ax.plot(steps, values, alpha=0.4)
        if len(values) >= 5:
            k = max(1, len(values) // 10)
            smooth = np.convolve(values, np.ones(k) / k, mode="valid")
            ax.plot(steps[k - 1:], smooth)
        ax.set_title(key)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
