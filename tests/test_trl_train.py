"""TRL training of the LM router on CPU with the real SmolLM2-135M: the multi-turn token split, 2 GRPO steps whose
episodes run through the graph, and 2 SFT steps on trajectories exported from a real `maestro predict` run; both
must change the weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import REAL, real_tasks
from typer.testing import CliRunner

from maestro_graph.cli import app
from maestro_graph.errors import ConfigError
from maestro_graph.policy.lm import conversation, final_answer_message
from maestro_graph.policy.lm.weights import cached_hf_folder
from maestro_graph.registry import Registry
from maestro_graph.rl.trl_train import LMTrainConfig, load_train_config, run_grpo, run_sft, sft_examples, turn_tokens
from maestro_graph.types import Step

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
TASKS = REAL / "tables" / "tasks.jsonl"


@pytest.fixture(scope="module")
def base():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cached_hf_folder()
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), AutoTokenizer.from_pretrained(folder)


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _changed(model, before) -> int:
    return sum(not torch.equal(before[k], v) for k, v in model.named_parameters())


def test_turn_tokens_mask_only_the_routers_own_turns(base, registry):
    _, tokenizer = base
    step = Step(model="rapidocr", skill="table-qa", answer="12", confidence=0.8, evidence="row: 12")
    messages = conversation("How many?", None, 1, [step], registry.pairs(), 2) + [final_answer_message("12")]
    prompt, completion, mask = turn_tokens(tokenizer, messages)
    assert len(completion) == len(mask) and 0 in mask and 1 in mask
    own = tokenizer.decode([t for t, m in zip(completion, mask) if m])
    env = tokenizer.decode([t for t, m in zip(completion, mask) if not m])
    assert "<search> rapidocr@@table-qa </search>" in own and "<answer> 12 </answer>" in own
    assert "<information>" in env and "<information>" not in own and "How many?" in tokenizer.decode(prompt)


def test_two_grpo_steps_through_the_graph_change_the_weights(base, tmp_path):
    model, tokenizer = base
    config = LMTrainConfig(tasks=[str(TASKS)], steps=2, num_generations=2, per_device_train_batch_size=2,
                           max_turns=1, constrained="choice", cost_weight=0.1, learning_rate=1e-4, card_chars=60,
                           observation_chars=200, seed=1)
    before = _snapshot(model)
    trainer = run_grpo(model, tokenizer, Registry.load(), real_tasks("tables")[:2], config, tmp_path)
    logs = [h for h in trainer.state.log_history if "rewards/outcome/mean" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all("rewards/format_errors/mean" in h and "step_time" in h for h in logs)
    assert _changed(model, before) > 0


def test_two_sft_steps_on_exported_trajectories_change_the_weights(base, tmp_path):
    from datasets import load_dataset

    model, tokenizer = base
    runner = CliRunner()
    pred, out, full = tmp_path / "pred.jsonl", tmp_path / "trl.jsonl", tmp_path / "full.jsonl"
    export = ["export", "--from", str(pred), "--tasks", str(TASKS), "--format", "trl"]
    for args in (["predict", "--tasks", str(TASKS), "--out", str(pred), "--policy", "rules", "--limit", "2",
                  "--workers", "1"],
                 [*export, "--out", str(full)],
                 [*export, "--out", str(out), "--card-chars", "60", "--observation-chars", "200"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    records = list(load_dataset("json", data_files=str(out), split="train"))
    longer = list(load_dataset("json", data_files=str(full), split="train"))
    # the prompt a router is trained on can match the train-lm config (short cards: a fast test, too)
    assert len(records[0]["messages"][0]["content"]) < len(longer[0]["messages"][0]["content"])
    failed = [{**r, "rewards": {**r["rewards"], "outcome": 0.0}} for r in records]
    assert sft_examples(failed) == []  # only successful episodes teach
    examples = sft_examples(records, min_score=0.0)
    assert examples and all(e["completion"][0]["role"] == "assistant" for e in examples)
    config = LMTrainConfig(tasks=[str(TASKS)], per_device_train_batch_size=2, num_generations=2, learning_rate=1e-4,
                           sft_min_score=0.0)
    before = _snapshot(model)
    trainer = run_sft(model, tokenizer, records, config, tmp_path / "sft", steps=2)
    assert trainer.state.global_step == 2 and _changed(model, before) > 0


def test_shipped_configs_load_and_extra_args_may_not_repeat_a_field():
    for name in ("train-lm-cpu.yaml", "train-lm-gpu.yaml"):
        config = load_train_config(ROOT / "configs" / name)
        assert config.gradient_checkpointing == (name == "train-lm-gpu.yaml")
    with pytest.raises(ConfigError, match="extra_grpo_args.gradient_checkpointing"):
        LMTrainConfig(tasks=[str(TASKS)], extra_grpo_args={"gradient_checkpointing": True})
