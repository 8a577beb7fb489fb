"""The two phases of `maestro train-lm` as TRL trainers (`SFTTrainer`, `GRPOTrainer` with the graph's rollouts),
each resuming from its last complete checkpoint, and the greedy evaluation that measures the router before, between
and after them (also as a callback during GRPO)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

from ...core.environment import TRL_EXPERIMENTAL_SILENCE
from ...core.tasks import Task
from ...episode.context import MaestroContext
from ...episode.graph import build_graph
from ...episode.runner import run_episode
from ...errors import ConfigError
from ...policy.lm.engines import TransformersLM
from ...policy.lm.policy import LMPolicy
from ...registry import Registry
from ...types import StopReason
from .config import LMTrainConfig
from .rewards import format_errors
from .trl_rollout import GraphRollout, grpo_dataset
from .trl_sft import VisionSFTCollator, sft_examples, sft_tokens
from .trl_tokens import sees_images

__all__ = ["evaluate_lm", "run_grpo", "run_sft", "validation_entry"]


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


def validation_entry(step: int, result: dict) -> dict:
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
            state.log_history.append(validation_entry(state.global_step, result))

    return Validation()


def _graph_grpo_trainer(base: type) -> type:
    """TRL's GRPO trainer with the per-token modality ids (Qwen-VL's `mm_token_type_ids`, which place its image
    tokens in the multimodal rotary positions) read off the tokens the rollout wrote, as TRL does for images a tool
    returns. TRL renders them from the dataset's prompt, while each group's rollout renders its own view of the
    registry (cards paraphrased, families hidden, options renumbered): a prompt of another length, which the model
    refused ("The shape of the mask [434] at index 0 does not match the shape of the indexed tensor [486]")."""

    class GraphGRPOTrainer(base):
        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, *args: Any,
                                               mm_token_type_ids: Any = None, **kwargs: Any) -> Any:
            if mm_token_type_ids is not None:
                mm_token_type_ids = input_ids.new_zeros(input_ids.shape)
                for kind, token in ((1, self._image_pad_token_id), (2, self._video_pad_token_id)):
                    if token is not None:
                        mm_token_type_ids[input_ids == token] = kind
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args,
                                                              mm_token_type_ids=mm_token_type_ids, **kwargs)

    return GraphGRPOTrainer


def run_grpo(model: Any, tokenizer: Any, registry: Registry, tasks: Sequence[Task], config: LMTrainConfig,
             out: Path, progress: bool = True, eval_items: Sequence[Task] = ()) -> tuple[Any, list[str]]:
    """`config.steps` GRPO steps with graph rollouts (and, with `config.eval_steps`, an evaluation on `eval_items`
    every so many); returns the trainer and the problems of its episodes (cut to `max_length`, completions rejected
    by the parser)."""
    from trl import GRPOConfig, GRPOTrainer

    TRL_EXPERIMENTAL_SILENCE.set_default("1")
    dataset, by_prompt = grpo_dataset([t for t in tasks if t.answer is not None], registry, config,
                                      images=sees_images(tokenizer))
    rewards = config.export_options.rewards.with_metrics()
    args = GRPOConfig(**config.trl_grpo_args(out, list(rewards.weights), progress), **config.extra_grpo_args)
    rollout = GraphRollout(registry, by_prompt, config)
    trainer = _graph_grpo_trainer(GRPOTrainer)(model=model, reward_funcs=rewards.trl_funcs(), args=args,
                                               train_dataset=dataset, processing_class=tokenizer, rollout_func=rollout)
    if config.eval_steps and eval_items:
        trainer.add_callback(_validation(trainer, registry, eval_items, config))
    trainer.train(resume_from_checkpoint=_last_checkpoint(out))
    return trainer, rollout.problems


def evaluate_lm(model: Any, tokenizer: Any, registry: Registry, tasks: Sequence[Task], config: LMTrainConfig) -> dict:
    """Greedy accuracy of the LM router (decoded as in training) through the graph, with its format-error rate."""
    policy = LMPolicy(TransformersLM(model, tokenizer, temperature=0.0, max_new_tokens=config.max_new_tokens),
                      constrained=cast(Literal["choice"] | None, config.constrained),  # as LMTrainConfig checked it
                      prompt=config.prompt, name="lm:eval",
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
