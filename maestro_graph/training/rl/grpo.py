"""GRPO for the neural policy (`NeuralGRPOTrainer`; TRL's `GRPOTrainer` trains the LM router, rl.trl_train): groups
of episodes sampled through the graph, rewards normalised within each group, a clipped policy-gradient objective with
an entropy bonus (`policy_loss`). The config is a dataclass apart from the trainer, as in TRL, and spells the
settings it shares with TRL's as TRL does. Rollouts run through the graph, which records each decision with its
log-probability under the acting policy (types.Decision); the trainer reads those records and re-scores only the
recorded actions under the new weights."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ...batch.executors import Executor, ThreadExecutor
from ...core.plots import pyplot
from ...core.tasks import Task
from ...episode.context import MaestroContext
from ...episode.graph import build_graph
from ...episode.runner import EpisodeResult, run_episode
from ...errors import ConfigError
from ...policy.base import ActionSpace, EpisodeView
from ...policy.neural import NeuralConfig, NeuralPolicy, read_tensor_file, write_tensor_file
from ...registry import Registry
from ...types import Action, InvalidAction
from .augment import RegistryView, sample_view
from .config import NeuralGRPOConfig
from .rewards import Rewards, outcome
from .warm_start import warm_start

__all__ = ["Group", "NeuralGRPOConfig", "NeuralGRPOTrainer", "Sample", "clipped_objective", "group_advantages",
           "policy_loss", "TRAINER_FORMAT"]

TRAINER_FORMAT = "maestro-grpo-state-1"
"""The resume state: safetensors holding the weights (`net.*`), their average (`average.*`) and Adam's moments
(`optim.INDEX.*`), with the rest as JSON in the header, so resuming never unpickles."""


_EXTENDABLE = {"steps", "save_steps"}
"""Settings a resumed run may change (training longer does not change what was done so far)."""


@dataclass
class Sample:
    """One recorded policy decision of a sampled episode: the view it was made in, the action, its log-probability
    under the weights that sampled it, and its episode's advantage."""

    view: EpisodeView
    action: Action | InvalidAction
    """The action recorded; an invalid one (no neural policy draws one) is in no action set (`_index` says so)."""
    old_log_prob: float
    advantage: float
    group: int


@dataclass
class _GroupPlan:
    """What one group samples, drawn on the driver: its task, the registry it sees and one seed per episode."""

    task: Task
    view: RegistryView
    seeds: list[int]

    def image_files(self) -> list[str]:
        """The task's image files, which travel with the group to a Ray worker (batch.executors.CarriesImages)."""
        return self.task.image_files()

    def with_image_files(self, paths: dict[str, str]) -> _GroupPlan:
        return replace(self, task=self.task.with_image_files(paths))


class _RolloutJob:
    """An executor job sampling one group's episodes with the current weights. Pickled (to a Ray worker) it carries
    the weights as tensors and the checkpoint header, never the policy object, and the worker rebuilds the policy
    once per step; each episode's decisions come back with their log-probabilities recorded."""

    def __init__(self, policy: NeuralPolicy, context: MaestroContext):
        self.policy = policy
        self.context = context
        """The trainer's rollout context (its samples rebuild the action space under the same one); each episode
        gets its own seed."""

    def __getstate__(self) -> dict:
        return {"header": self.policy.checkpoint_header(), "weights": self.policy.net.state_dict(),
                "context": self.context}

    def __setstate__(self, state: dict) -> None:
        self.policy = NeuralPolicy.from_checkpoint(state["header"], state["weights"], file="<broadcast weights>")
        self.context = state["context"]

    def __call__(self, registry: Registry, plan: _GroupPlan) -> list[EpisodeResult]:
        graph = build_graph(plan.view.apply(registry), self.policy)
        task = plan.task
        return [run_episode(graph, task.question, task.images, task.choices, context=replace(self.context, seed=seed))
                for seed in plan.seeds]


@dataclass
class Group:
    """One group's recorded decisions with the registry its episodes saw (their action sets are rebuilt from it)."""

    registry: Registry
    samples: list[Sample] = field(default_factory=list)


def _samples(episode: EpisodeResult, task: Task, context: MaestroContext, advantage: float,
             group: int) -> list[Sample]:
    """The episode's recorded decisions that the policy made (an overruled one is the graph's, not a draw of the
    policy's; a forced one, with log-probability 0 and no gradient, still counts in the loss's mean), each with the
    view the router had: the question it routed on (read from the image for a blank one) and its options."""
    seen = EpisodeView.of_task(task, (), context.max_turns, context.max_cost)
    if episode.question is not None:
        seen = replace(seen, question=episode.question, choices=tuple(episode.choices) if episode.choices else None)
    return [Sample(replace(seen, steps=tuple(episode.steps[:d.turn])), d.action(), d.log_prob, advantage, group)
            for d in episode.decisions if d.log_prob is not None]


def group_advantages(rewards: np.ndarray, std_floor: float = 0.0) -> np.ndarray:
    """GRPO's advantages: rewards centred on the group's mean, divided by its std (or `std_floor` if larger)."""
    return (rewards - rewards.mean()) / (max(rewards.std(), std_floor) + 1e-6)


def clipped_objective(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                      epsilon: float) -> torch.Tensor:
    """PPO's clipped surrogate per decision, min(r A, clip(r, 1-epsilon, 1+epsilon) A) with r the ratio of the new
    probability to the sampling one: once r has moved epsilon past 1 in the advantage's direction the term is flat,
    so an update cannot push an action's probability further from the one it was sampled with."""
    ratio = torch.exp(log_probs - old_log_probs)
    return torch.min(ratio * advantages, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages)


def policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                entropies: torch.Tensor, *, epsilon: float, entropy_coef: float) -> torch.Tensor:
    """The loss the optimiser minimises: minus the mean clipped objective and entropy bonus over the decisions."""
    return -(clipped_objective(log_probs, old_log_probs, advantages, epsilon) + entropy_coef * entropies).mean()


def _index(actions: tuple, action: Action | InvalidAction) -> int:
    for i, candidate in enumerate(actions):
        if candidate == action:
            return i
    raise ValueError(f"action {action} is not in the re-scored action set")


def _read_state(path: Path) -> tuple[dict, dict[str, dict[str, torch.Tensor]]]:
    """A resume state's JSON part (with the policy's checkpoint header under "policy") and its tensors grouped by
    prefix (net, average, optim); another format, a missing entry or a stray tensor is a ConfigError."""
    header, tensors = read_tensor_file(path)
    if header.get("format") != TRAINER_FORMAT:
        raise ConfigError(f"not a {TRAINER_FORMAT} resume state (format {header.get('format')!r})", file=str(path),
                          field="format")
    state = trainer if isinstance(trainer := header.get("trainer"), dict) else {}
    missing = {"step", "param_groups", "history", "config", "weights", "best"} - set(state)
    if missing:
        raise ConfigError(f"the resume state lacks {sorted(missing)}", file=str(path), field="trainer")
    parts: dict[str, dict[str, torch.Tensor]] = {"net": {}, "average": {}, "optim": {}}
    for key, tensor in tensors.items():
        prefix, _, name = key.partition(".")
        if prefix not in parts:
            raise ConfigError(f"unexpected tensor {key!r}", file=str(path), field=key)
        parts[prefix][name] = tensor
    return {**state, "policy": header.get("policy")}, parts


class NeuralGRPOTrainer:
    """Trains a NeuralPolicy on task files; writes checkpoints, a JSONL log and PNG curves under `out_dir`."""

    def __init__(self, registry: Registry, tasks: list[Task], config: NeuralGRPOConfig, out_dir: str | Path,
                 policy: NeuralPolicy | None = None, eval_tasks: list[Task] | None = None,
                 executor: Executor | None = None):
        if not tasks:
            raise ConfigError("no training tasks", field="tasks")
        self.registry = registry
        self.executor = executor or ThreadExecutor(registry)
        """Where the groups' episodes run (default: one after another here; RayExecutor: on Ray workers, with the
        weights sent each step)."""
        self.tasks = [t for t in tasks if t.answer is not None]
        self.eval_tasks = [t for t in eval_tasks or [] if t.answer is not None]
        """Validation items: at every checkpoint the averaged policy answers them greedily, and the best one so far
        is kept as best.safetensors (selected on these items, never on the ones a report evaluates)."""
        held_out = {t.identity() for t in self.eval_tasks}
        shared = {t.identity() for t in self.tasks} & held_out if held_out else set()
        if shared:
            raise ConfigError(f"{len(shared)} validation items are also training items (e.g. "
                              f"{sorted(shared)[0][0][:60]!r}): validate on items the policy is not trained on",
                              field="eval_tasks")
        self.best: dict | None = None
        """{"step", "score"} of best.safetensors: the highest validation score, macro accuracy - cost_weight * mean
        cost."""
        self.config = config
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.policy = policy or NeuralPolicy(NeuralConfig(hidden=config.hidden, seed=config.seed,
                                                         stop_without_answer=config.stop_without_answer))
        self.optim = torch.optim.Adam(self.policy.net.parameters(), lr=config.learning_rate)
        self.step = 0
        self.warm_started = False
        """Whether the warm start (config.warm_start_steps) is done; it runs whole before GRPO's first step."""
        self.history: list[dict] = []
        self.weights = np.ones(len(self.tasks))
        """Per-task sampling weights (revisit_weight after a group without signal)."""
        self.average = {k: v.detach().clone() for k, v in self.policy.net.state_dict().items()}
        """The moving average of the weights (ema_decay) that policy.safetensors holds."""
        self.context = MaestroContext(max_turns=config.max_turns, max_cost=config.max_cost, greedy=False,
                                      reach_floor=0.0)
        """Rollouts run whole episodes: the reach (a serving-time stop, MaestroContext.reach_floor) is off."""
        self.rewards = Rewards.make(cost_weight=config.cost_weight, call_weight=config.call_weight)
        """Outcome minus cost_weight * cost, minus call_weight per call (the neural policy makes no format
        errors)."""

    # -- checkpoints -------------------------------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path:
        """The resume state (TRAINER_FORMAT)."""
        return self.out / "checkpoint.safetensors"

    @property
    def policy_path(self) -> Path:
        """The result: the averaged policy, rewritten at every checkpoint."""
        return self.out / "policy.safetensors"

    @property
    def best_path(self) -> Path:
        """The averaged policy of the best validation score so far (with eval tasks)."""
        return self.out / "best.safetensors"

    def save(self) -> None:
        """The resume state in one file (weights, their average and Adam's per-parameter moments as tensors, the rest
        as JSON), then the averaged policy."""
        optim = self.optim.state_dict()
        tensors = {**{f"net.{k}": v for k, v in self.policy.net.state_dict().items()},
                   **{f"average.{k}": v for k, v in self.average.items()},
                   **{f"optim.{i}.{k}": v for i, state in optim["state"].items() for k, v in state.items()}}
        write_tensor_file(self.checkpoint_path, tensors, {
            "format": TRAINER_FORMAT, "policy": self.policy.checkpoint_header(),
            "trainer": {"step": self.step, "param_groups": optim["param_groups"], "history": self.history,
                        "config": asdict(self.config), "weights": self.weights.tolist(), "best": self.best,
                        "warm_started": self.warm_started}})
        self.averaged_policy().save(self.policy_path)

    def averaged_policy(self) -> NeuralPolicy:
        """The trained policy with the averaged weights (what policy.safetensors holds)."""
        policy = NeuralPolicy(self.policy.config)
        policy.net.load_state_dict(self.average)
        return policy

    def resume(self) -> bool:
        """Continue from the last checkpoint under `out_dir` when there is one (same config required)."""
        path = self.checkpoint_path
        if not path.is_file():
            return False
        state, parts = _read_state(path)
        mine = {k: v for k, v in asdict(self.config).items() if k not in _EXTENDABLE}
        # a setting added since the state was written had its default then; one renamed since keeps its value
        written = {NeuralGRPOConfig.RENAMED.get(k, k): v for k, v in state["config"].items()}
        theirs = {k: v for k, v in {**asdict(NeuralGRPOConfig()), **written}.items() if k not in _EXTENDABLE}
        if mine != theirs:
            differ = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise ConfigError(f"the checkpoint was trained with another config ({differ}); use a new --out or the "
                              "same settings", file=str(path), field="trainer.config")
        if len(state["weights"]) != len(self.tasks):
            raise ConfigError(f"the checkpoint was trained on {len(state['weights'])} tasks, these files hold "
                              f"{len(self.tasks)}; use a new --out or the same task files",
                              file=str(path), field="trainer.weights")
        self.policy = NeuralPolicy.from_checkpoint(state["policy"], parts["net"], file=str(path))
        self.average = NeuralPolicy.from_checkpoint(state["policy"], parts["average"], file=str(path)
                                                    ).net.state_dict()
        moments: dict[int, dict[str, torch.Tensor]] = {}
        for key, tensor in parts["optim"].items():
            index, _, name = key.partition(".")
            moments.setdefault(int(index), {})[name] = tensor
        self.optim = torch.optim.Adam(self.policy.net.parameters(), lr=self.config.learning_rate)
        self.optim.load_state_dict({"state": moments, "param_groups": state["param_groups"]})
        self.step = state["step"]
        self.history = state["history"]
        self.weights = np.asarray(state["weights"])
        self.best = state["best"]
        self.warm_started = bool(state.get("warm_started", False))
        return True

    # -- validation --------------------------------------------------------------------------------------------------
    def validate(self) -> dict:
        """The averaged policy on the validation items, greedy, through the full registry (no dropout, the real card
        texts); best.safetensors follows the highest score. The figures join this step's history entry and log
        line."""
        from ..evaluation.evaluate import run_policy

        cfg = self.config
        policy = self.averaged_policy()
        context = replace(self.context, greedy=True)
        metrics = run_policy(self.registry, self.eval_tasks, policy, context=context).metrics()
        figures = {"val_macro": metrics["macro_accuracy"], "val_accuracy": metrics["accuracy"],
                   "val_cost": metrics["mean_cost"], "val_calls": metrics["calls_per_episode"],
                   "val_score": metrics["macro_accuracy"] - cfg.cost_weight * metrics["mean_cost"]}
        if self.best is None or figures["val_score"] > self.best["score"]:
            self.best = {"step": self.step, "score": figures["val_score"]}
            policy.save(self.best_path, extra={"validation": {"step": self.step, **figures}})
        if self.history:
            self.history[-1].update(figures)
        with (self.out / "train_log.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": self.step, **figures}) + "\n")
        return figures

    # -- one step ----------------------------------------------------------------------------------------------------
    def _rollouts(self) -> tuple[list[Group], dict]:
        """Sample the step's groups on the executor (each group one job, the learner staying here). Every random
        choice derives from (seed, step) and is drawn here before any episode runs, and each episode has its own
        seed, so a resumed run, or one on Ray workers, samples the same groups."""
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, self.step])
        picks = rng.choice(len(self.tasks), size=min(cfg.tasks_per_step, len(self.tasks)), replace=False,
                           p=self.weights / self.weights.sum())
        plans = []
        for task_index in picks:  # every draw first, in the order a serial run makes them
            view = sample_view(self.registry, rng, cfg)
            seeds = [int(rng.integers(2**31)) + g for g in range(cfg.num_generations)]
            plans.append(_GroupPlan(self.tasks[int(task_index)], view, seeds))
        sampled = dict(self.executor.map_unordered(_RolloutJob(self.policy, self.context), plans))
        groups, rewards_all, scores_all, calls, costs, group_rewards = [], [], [], [], [], []
        skipped = 0
        for g_index, task_index in enumerate(picks):
            task = self.tasks[int(task_index)]
            episodes = sampled[g_index]
            rewards = np.asarray([self.rewards(task, e) for e in episodes])
            group_rewards.append(rewards.tolist())
            rewards_all += rewards.tolist()
            scores_all += [outcome(task, e) for e in episodes]
            calls += [len(e.steps) for e in episodes]
            costs += [e.cost for e in episodes]
            std = rewards.std()
            self.weights[task_index] = cfg.revisit_weight if std < 1e-8 else 1.0
            if std < 1e-8:  # every episode scored the same: no signal, counted and left out
                skipped += 1
                continue
            advantages = group_advantages(rewards, cfg.advantage_std_floor)
            group = Group(plans[g_index].view.apply(self.registry))  # the registry the episodes saw
            for episode, adv in zip(episodes, advantages):
                group.samples += _samples(episode, task, self.context, float(adv), g_index)
            groups.append(group)
        stats = {"reward": float(np.mean(rewards_all)), "accuracy": float(np.mean(scores_all)),
                 "calls": float(np.mean(calls)), "cost": float(np.mean(costs)), "skipped_groups": skipped,
                 "groups": len(picks), "group_rewards": group_rewards}
        return groups, stats

    def _score(self, group: Group, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        scored = self.policy.score(sample.view, ActionSpace.build(group.registry, sample.view))
        probs = scored.probs
        log_prob = torch.log(probs[_index(scored.actions, sample.action)])
        entropy = -(probs * torch.log(probs)).sum()
        return log_prob, entropy

    def update(self, groups: list[Group]) -> list[float]:
        """The optimiser's part of a step: `num_iterations` passes of `policy_loss` over the groups' recorded
        decisions, each re-scored under the current weights; returns the entropy of each scored distribution."""
        cfg = self.config
        decisions = [(g, d) for g in groups for d in g.samples]
        entropies: list[float] = []
        for _ in range(cfg.num_iterations if decisions else 0):
            self.optim.zero_grad()
            scored = [self._score(group, d) for group, d in decisions]
            log_probs = torch.stack([log_prob for log_prob, _ in scored])
            entropy = torch.stack([e for _, e in scored])
            old = torch.tensor([d.old_log_prob for _, d in decisions], dtype=log_probs.dtype)
            advantages = torch.tensor([d.advantage for _, d in decisions], dtype=log_probs.dtype)
            policy_loss(log_probs, old, advantages, entropy, epsilon=cfg.epsilon,
                        entropy_coef=cfg.entropy_coef).backward()
            torch.nn.utils.clip_grad_norm_(self.policy.net.parameters(), 1.0)
            self.optim.step()
            entropies += entropy.detach().tolist()
        return entropies

    def train_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        groups, stats = self._rollouts()
        decisions = sum(len(g.samples) for g in groups)
        entropies = self.update(groups)
        with torch.no_grad():
            for key, value in self.policy.net.state_dict().items():
                self.average[key].mul_(cfg.ema_decay).add_(value, alpha=1 - cfg.ema_decay)
        self.step += 1
        stats.update(step=self.step, entropy=float(np.mean(entropies)) if entropies else 0.0,
                     decisions=decisions, seconds=time.perf_counter() - start)
        self.history.append(stats)
        with (self.out / "train_log.jsonl").open("a") as fh:
            fh.write(json.dumps(stats) + "\n")
        return stats

    def warm_start(self, progress: bool = True) -> None:
        """The full-information warm start (rl.warm_start), whole; its steps join train_log.jsonl, the average
        restarts from its weights, and the result is validated (step 0) and checkpointed before GRPO begins."""
        with (self.out / "train_log.jsonl").open("a") as fh:
            warm_start(self.policy, self.registry, self.tasks, self.config, self.executor, progress,
                       log=lambda record: fh.write(json.dumps(record) + "\n"))
        self.average = {k: v.detach().clone() for k, v in self.policy.net.state_dict().items()}
        self.warm_started = True
        if self.eval_tasks:
            self.validate()
        self.save()

    def train(self, progress: bool = True) -> NeuralPolicy:
        if self.config.warm_start_steps and not self.warm_started:
            self.warm_start(progress)
        random.seed(self.config.seed)
        torch.manual_seed(self.config.seed + self.step)
        bar = tqdm(total=self.config.steps, initial=self.step, desc="GRPO", unit="step", disable=not progress)
        while self.step < self.config.steps:
            stats = self.train_step()
            bar.set_postfix(reward=f"{stats['reward']:.3f}", acc=f"{stats['accuracy']:.3f}",
                            calls=f"{stats['calls']:.2f}", ent=f"{stats['entropy']:.2f}")
            bar.update()
            if self.step % self.config.save_steps == 0 or self.step == self.config.steps:
                if self.eval_tasks:
                    self.validate()
                self.save()
                plot_curves(self.history, self.out / "curves.png")
        bar.close()
        return self.averaged_policy()


def plot_curves(history: list[dict], path: Path) -> None:
    """Reward, accuracy, calls per episode, cost and entropy against the step (and the validation figures)."""
    plt = pyplot(str(path))
    if plt is None:
        return

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
