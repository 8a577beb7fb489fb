"""GRPO's data and rollouts for the LM router (TRL's `rollout_func` hook): the dataset of first prompts, the
registry view each group of episodes reads, and the rollout that runs each prompt as one episode through the same
graph as serving, on the trainer's current weights (its own model, or TRL's colocated vLLM engine)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import numpy as np

from ...core.tasks import Task
from ...episode.context import MaestroContext
from ...episode.graph import build_graph
from ...episode.runner import run_episode
from ...images.load import load_images
from ...policy.lm.engines import TransformersLM
from ...policy.lm.policy import LMPolicy
from ...policy.lm.prompt import PromptOptions, conversation, with_images
from ...registry import Registry
from .augment import sample_card_texts, sample_dropout, sample_unprofiled
from .config import LMTrainConfig
from .export import episode_messages
from .trl_tokens import chat_ids, episode_tokens, sees_images

__all__ = ["GraphRollout", "TrainerVLLM", "TrainingView", "grpo_dataset", "training_view"]


def _part(part: dict) -> Any:
    if part.get("type") != "image":
        return part.get("text")
    image = part["image"]
    return [image.mode, image.size, hashlib.sha256(image.tobytes()).hexdigest()]


def _key(prompt: list[dict]) -> str:
    """A prompt's identity, in text form or with its images in content parts (by their pixels): the same for a
    dataset row and for the prompt TRL hands the rollout (its copy of the row, images filled in)."""
    return json.dumps([[m["role"], m["content"] if isinstance(m["content"], str) else [_part(p) for p in m["content"]]]
                       for m in prompt], sort_keys=True, ensure_ascii=False)


def _prompt_images(prompt: list[dict]) -> list[Any]:
    return [p["image"] for m in prompt if isinstance(m["content"], list) for p in m["content"]
            if p.get("type") == "image"]


@dataclass(frozen=True)
class TrainingView:
    """What one training episode (GRPO group, SFT rendering) reads: a registry with whole families hidden and some
    card texts paraphrased (rl/augment.py, the neural policy's augmentations), and the option numbers shuffled, so
    that what predicts an expert's outcome is its text, never its name or its number."""

    registry: Registry
    prompt: PromptOptions


def training_view(registry: Registry, config: LMTrainConfig, rng: np.random.Generator, salt: int,
                  keep: Sequence[str] = ()) -> TrainingView:
    """One draw of the augmentations; the models and skills of the pairs `keep` (those an imitated episode called,
    whose actions must stay on offer) are never hidden."""
    models, skills = sample_dropout(registry, rng, 0.0, config.family_dropout)
    models -= {pair.split("@@")[0] for pair in keep}
    skills -= {pair.split("@@")[-1] for pair in keep}
    shown = registry.without(models=models, skills=skills)
    hidden = sample_unprofiled(shown, rng, config.profile_dropout) if config.prompt.reads_reach else set()
    return TrainingView(shown.without(descriptions=sample_card_texts(shown, rng, config.paraphrase_prob),
                                      unprofiled=hidden),
                        replace(config.prompt, shuffle=salt))


def grpo_dataset(tasks: Sequence[Task], registry: Registry, config: LMTrainConfig,
                 images: bool = False) -> tuple[Any, dict[str, list[Task]]]:
    """The GRPO dataset (`prompt`: system + user messages; with `images`, an `images` column of each task's images
    for a vision-language model) and the tasks behind each distinct prompt (tasks that read the same, e.g. one
    question on different images for a text router, share a prompt; a group runs one of them)."""
    from datasets import Dataset

    by_prompt: dict[str, list[Task]] = {}
    rows = []
    for task in tasks:
        prompt = conversation(task.question, task.choices, len(task.images), [], registry.pairs(), config.max_turns,
                              config.prompt)
        row: dict[str, Any] = {"prompt": prompt}
        if images:
            row["images"] = load_images(task.images)
            key = _key(with_images(prompt, row["images"]))
        else:
            key = _key(prompt)
        if key not in by_prompt:
            rows.append(row)
        by_prompt.setdefault(key, []).append(task)
    return Dataset.from_list(rows), by_prompt


class TrainerVLLM:
    """Router text from TRL's own vLLM engine (`use_vllm=True`), so rollouts use the weights being trained. One turn
    is at most `max_new_tokens`: TRL's engine would otherwise write up to the whole episode's completion length
    (`max_completion_length`) every turn."""

    def __init__(self, trainer: Any, max_new_tokens: int):
        self.trainer = trainer
        self.max_new_tokens = max_new_tokens

    def complete(self, messages: list[dict], images: Sequence[str] = (), *, choices=None, regex=None) -> str:
        processing = self.trainer.processing_class
        pixels = load_images(tuple(images)) if sees_images(processing) else []
        prompt = chat_ids(processing, with_images(messages, pixels) if pixels else messages, True)
        engine = self.trainer.vllm_generation
        episode_length, engine.max_completion_length = engine.max_completion_length, self.max_new_tokens
        try:
            _, completion_ids, _, _ = engine.generate([prompt], [pixels] if pixels else None, 1)
        finally:
            engine.max_completion_length = episode_length
        return processing.decode(completion_ids[0], skip_special_tokens=True).strip()


class GraphRollout:
    """TRL `rollout_func`: one graph episode per received prompt with the trainer's current model. The episodes of
    one prompt (a group) share a task and a `training_view`: the registry with families hidden and cards paraphrased,
    and one option numbering, drawn anew for every group, so GRPO rewards reading a card, not a number."""

    def __init__(self, registry: Registry, by_prompt: dict[str, list[Task]], config: LMTrainConfig):
        self.registry = registry
        self.by_prompt = by_prompt
        self.config = config
        self._step = -1
        self._calls = 0
        self.problems: list[str] = []
        """Episodes cut to `max_length` and completions the parser rejected, each named by task and turn."""

    def backend(self, trainer: Any) -> Any:
        if self.config.use_vllm:
            return TrainerVLLM(trainer, self.config.max_new_tokens)
        model = trainer.accelerator.unwrap_model(trainer.model)
        return TransformersLM(model, trainer.processing_class, temperature=self.config.temperature,
                              max_new_tokens=self.config.max_new_tokens)

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list | None]:
        cfg = self.config
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        backend = self.backend(trainer)
        chosen: dict[str, tuple[Task, TrainingView, Any]] = {}
        if trainer.state.global_step != self._step:  # episodes are seeded by step, so a resumed run replays them
            self._step, self._calls = trainer.state.global_step, 0
        rewards = cfg.export_options.rewards.with_metrics()
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "env_mask",
                                                *(f"reward_{name}" for name in rewards.names))}
        try:
            for prompt in prompts:
                key = _key(prompt)
                seed = (cfg.seed * 1_000_003 + self._step) * 1_000_003 + self._calls
                if key not in chosen:  # a group: one task, one registry view and one numbering for its episodes
                    view = training_view(self.registry, cfg, np.random.default_rng(seed), seed)
                    constrained = cast(Literal["choice"] | None, cfg.constrained)  # as LMTrainConfig checked it
                    policy = LMPolicy(backend, constrained=constrained, prompt=view.prompt, name="lm:train",
                                      ranker=cfg.ranker, served=self.registry)
                    chosen[key] = (random.Random(seed).choice(self.by_prompt[key]), view,
                                   build_graph(view.registry, policy))
                task, view, graph = chosen[key]
                self._calls += 1
                context = MaestroContext(max_turns=cfg.max_turns, max_cost=cfg.max_cost, greedy=False, seed=seed,
                                         reach_floor=0.0)  # rollouts run whole episodes
                episode = run_episode(graph, task.question, task.images, task.choices, context=context)
                messages = episode_messages(task, episode, view.registry,
                                            replace(cfg.export_options, prompt=view.prompt))
                if sees_images(trainer.processing_class):  # the images TRL's forward pass gets with this prompt
                    messages = with_images(messages, _prompt_images(prompt))
                prompt_ids, completion_ids, mask, change = episode_tokens(trainer.processing_class, messages,
                                                                          cfg.max_length)
                self.problems += [f"task {task.id}: turn {d.turn}: completion rejected: {d.reason}"
                                  for d in episode.decisions if d.kind == "invalid"]
                if change:
                    self.problems.append(f"task {task.id}: {change} (stop: {episode.stop_reason})")
                out["prompt_ids"].append(prompt_ids)
                out["completion_ids"].append(completion_ids)
                out["env_mask"].append(mask)
                for name, value in rewards.parts(task, episode).items():
                    out[f"reward_{name}"].append(value)
        finally:
            model.train(was_training)
        return {**out, "logprobs": None}  # TRL recomputes the old log-probabilities itself

