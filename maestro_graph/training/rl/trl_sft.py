"""The SFT warm start's data: exported or teacher episodes rendered as training views, cut to the router's own turns
(the loss on them only, as in GRPO), and batched with their images for a vision-language model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from ...core.tasks import Task
from ...episode.runner import EpisodeResult
from ...errors import ConfigError, first_validation_problem
from ...images.load import load_images
from ...policy.lm.prompt import with_images
from ...registry import Registry
from .config import LMTrainConfig
from .export import trl_record
from .trl_rollout import training_view
from .trl_tokens import sees_images, turn_tokens

__all__ = ["VisionSFTCollator", "sft_examples", "sft_renderings", "sft_tokens"]


def sft_renderings(records: Sequence[dict], tasks: Sequence[Task], registry: Registry,
                   config: LMTrainConfig) -> tuple[list[dict], list[str]]:
    """SFT records of `records`: an exported TRL record is taken as it is; a prediction record (a teacher's episode,
    `maestro predict` on the training `tasks`) is rendered `sft_views` times from `registry`, each rendering with its
    own `training_view` (families hidden, cards paraphrased, numbers shuffled; the episode's own pairs kept), so
    imitation cannot tie the teacher's choice to a name or a number. Returns the records and a message naming each
    prediction record left out (unknown id, unreadable, or calling a pair `registry` lacks)."""
    by_id: dict[object, Task] = {t.id: t for t in tasks}  # looked up by a record's id, whatever JSON it holds
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
            options = replace(config.export_options, prompt=view.prompt, served=registry)
            out.append(trl_record(task, episode, view.registry, options))
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
