"""TRL training of the LM router on CPU with the real SmolLM2-135M: the multi-turn token split, SFT examples from
trajectories exported from a real `maestro predict` run, the CPU recipe end to end at a tiny size (SFT and GRPO
through the graph must change the adapter), and the GPU config's code path with the tiny model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import REAL
from tiny_vlm import build_tiny_llama
from typer.testing import CliRunner

from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.errors import ConfigError
from maestro_graph.policy.lm import PromptOptions, conversation, final_answer_message, option_pairs, parse_action
from maestro_graph.policy.lm.weights import cached_hf_folder
from maestro_graph.training.rl.trl_sft import sft_examples, sft_renderings, sft_tokens
from maestro_graph.training.rl.trl_tokens import episode_tokens, turn_tokens
from maestro_graph.training.rl.trl_train import LMTrainConfig, load_train_config
from maestro_graph.types import Invoke, Step

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
TASKS = REAL / "tables" / "tasks.jsonl"


@pytest.fixture(scope="module")
def base():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cached_hf_folder()
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), AutoTokenizer.from_pretrained(folder)


def test_turn_tokens_mask_only_the_routers_own_turns(base, registry):
    _, tokenizer = base
    step = Step(model="rapidocr", skill="table-qa", answer="12", confidence=0.8, evidence="row: 12")
    messages = conversation("How many?", None, 1, [step], registry.pairs(), 2) + [final_answer_message("12")]
    prompt, completion, mask = turn_tokens(tokenizer, messages)
    assert len(completion) == len(mask) and 0 in mask and 1 in mask
    own = tokenizer.decode([t for t, m in zip(completion, mask) if m])
    env = tokenizer.decode([t for t, m in zip(completion, mask) if not m])
    number = [p.id for p in option_pairs(registry.pairs(), "How many?", None, PromptOptions())].index(step.pair) + 1
    assert f"<search> {number} </search>" in own and "<answer> 12 </answer>" in own
    assert "<information>" in env and "<information>" not in own and "How many?" in tokenizer.decode(prompt)


def test_an_episode_without_a_router_turn_gives_grpo_one_masked_token(base, registry):
    """The graph can end an episode without asking the router (every skill declines the question); TRL indexes the
    last completion token, so the rollout gives it one end-of-sequence token that trains nothing (a crash in a real
    GRPO run before)."""
    _, tokenizer = base
    messages = conversation("How many?", None, 1, [], registry.pairs(), 2)
    prompt, completion, mask, change = episode_tokens(tokenizer, messages, 1536)
    assert completion == [tokenizer.eos_token_id] and mask == [0] and change == "no router turn"
    full = messages + [final_answer_message("12")]
    prompt, completion, mask, change = episode_tokens(tokenizer, full, 1536)
    assert change is None and 1 in mask
    _, cut, cut_mask, change = episode_tokens(tokenizer, full, len(prompt) + 2)
    assert cut == completion[:2] and len(cut_mask) == 2 and "cut to max_length" in change


def test_exported_trajectories_become_sft_examples(tmp_path, base):
    """The SFT data path: `maestro export` with the train-lm prompt limits, successful episodes only, one example
    per episode with the loss on the router's turns only, an episode over max_length named and skipped. (That SFT
    and GRPO then change the weights is asserted by the shrunken recipe below.)"""
    from datasets import load_dataset

    runner = CliRunner()
    pred, out, full, measured = (tmp_path / name for name in ("pred.jsonl", "trl.jsonl", "full.jsonl", "m.jsonl"))
    export = ["export", "--from", str(pred), "--tasks", str(TASKS), "--format", "trl"]
    for args in (["predict", "--tasks", str(TASKS), "--out", str(pred), "--policy", "rules", "--limit", "2",
                  "--workers", "1"],
                 [*export, "--out", str(full)],
                 [*export, "--out", str(out), "--card-chars", "60", "--observation-chars", "200"],
                 [*export, "--out", str(measured), "--measured",
                  "--registry", str(ROOT / "configs/registry-nolm.yaml")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    records = list(load_dataset("json", data_files=str(out), split="train"))
    longer = list(load_dataset("json", data_files=str(full), split="train"))
    # the prompt a router is trained on can match the train-lm config (short cards: a fast test, too)
    assert len(records[0]["messages"][0]["content"]) < len(longer[0]["messages"][0]["content"])
    # a router trained with measured figures is exported with them (the registry's profile)
    figures = list(load_dataset("json", data_files=str(measured), split="train"))
    assert "right on similar questions" in json.dumps(figures[0]["messages"][:2])
    assert "right on similar questions" not in json.dumps(longer[0]["messages"][:2])
    failed = [{**r, "rewards": {**r["rewards"], "outcome": 0.0}} for r in records]
    assert sft_examples(failed) == []  # only successful episodes teach
    examples = sft_examples(records, min_score=0.0)
    assert len(examples) == len(records) == 2
    _, tokenizer = base
    rows, problems = sft_tokens(examples, tokenizer, max_length=4096)
    assert len(rows) == 2 and not problems
    learned = tokenizer.decode([t for t in rows[0]["labels"] if t != -100])
    assert learned.count("<|im_end|>") == sum(m["role"] == "assistant" for m in examples[0]["messages"][2:])
    assert "<answer>" in learned and "<information>" not in learned and "Question:" not in learned
    short, problems = sft_tokens(examples, tokenizer, max_length=len(rows[0]["input_ids"]) - 1)
    assert len(short) < 2 and problems[0].startswith(f"episode {examples[0]['id']}: ")


def test_teacher_episodes_are_rendered_with_families_hidden_and_numbers_shuffled(tmp_path, registry):
    """A prediction file as SFT data: each teacher episode rendered `sft_views` times, each time under other option
    numbers and with other families hidden, its own calls always on offer and written with the number its expert
    has in that rendering; an episode calling a pair the registry lacks is named and left out."""
    _export(tmp_path, 60, 160)
    records = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    tasks = load_tasks(TASKS)[0]
    config = LMTrainConfig(tasks=[str(TASKS)], sft_views=6, family_dropout=0.5, card_chars=60)
    rendered, problems = sft_renderings(records, tasks, registry, config)
    assert len(rendered) == 6 * len(records) and not problems
    listings = set()
    for i, record in enumerate(records):
        called = [f"{s['model']}@@{s['skill']}" for s in record["steps"] if s["model"]]
        for copy in rendered[6 * i: 6 * i + 6]:
            listed = [f"{m}@@{s}" for s, m in re.findall(r"^\d+\. (\S+) by (\S+):", copy["messages"][0]["content"],
                                                          re.MULTILINE)]
            actions = [parse_action(m["content"], listed) for m in copy["messages"][2:] if m["role"] == "assistant"]
            assert [a.pair for a in actions if isinstance(a, Invoke)] == called
            listings.add(tuple(listed))
    assert len(listings) > len(records) and len({len(x) for x in listings}) > 1  # renumbered, families hidden
    model = next(s["model"] for r in records for s in r["steps"] if s["model"])
    _, problems = sft_renderings(records, tasks, registry.without(models={model}), config)
    assert problems and f"calls {model}@@" in problems[0] and "which the registry lacks" in problems[0]


def test_shipped_configs_load_and_extra_args_may_not_repeat_a_field():
    for path in (ROOT / "configs" / "recipes" / "lm-router-sft.yaml", ROOT / "configs" / "train-lm-gpu.yaml"):
        config = load_train_config(path, tasks=[str(TASKS)], sft_data=str(TASKS))  # arguments, not in the recipes
        assert config.gradient_checkpointing == (path.name == "train-lm-gpu.yaml")
    with pytest.raises(ConfigError, match="extra_grpo_args.gradient_checkpointing"):
        LMTrainConfig(tasks=[str(TASKS)], extra_grpo_args={"gradient_checkpointing": True})
    with pytest.raises(ConfigError, match="order='neural' ranks by a neural policy and shows no measured") as info:
        LMTrainConfig(tasks=[str(TASKS)], order="neural", measured=True)
    assert info.value.field == "order"


def test_the_gpu_recipes_trainer_arguments_are_the_installed_trls(tmp_path):
    """configs/train-lm-gpu.yaml's GRPO arguments build the installed TRL's `GRPOConfig` (a field TRL renamed or
    dropped fails here, not at a GPU's first step), with the colocated vLLM engine's context set from `max_length`
    and no importance-sampling correction, which needs sampling log-probabilities the graph's rollouts do not
    return. `use_cpu` only because this machine has no GPU for its bf16."""
    from trl import GRPOConfig

    config = load_train_config(ROOT / "configs" / "train-lm-gpu.yaml", tasks=[str(TASKS)])
    args = GRPOConfig(**{**config.trl_grpo_args(tmp_path, [1.0, -1.0, -1.0]), "use_cpu": True},
                      **config.extra_grpo_args)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.bf16 and args.gradient_checkpointing
    assert args.vllm_max_model_length == config.max_length == 8192 and args.vllm_gpu_memory_utilization == 0.3
    assert args.vllm_importance_sampling_correction is False


def _export(tmp_path: Path, card_chars: int, observation_chars: int) -> Path:
    """A TRL trajectory file of the rules policy's episodes on two real items, plus a damaged line."""
    runner = CliRunner()
    pred, out = tmp_path / "pred.jsonl", tmp_path / "trl.jsonl"
    for args in (["predict", "--tasks", str(TASKS), "--out", str(pred), "--policy", "rules", "--limit", "2",
                  "--workers", "1", "--max-turns", "1"],
                 ["export", "--from", str(pred), "--tasks", str(TASKS), "--format", "trl", "--out", str(out),
                  "--card-chars", str(card_chars), "--observation-chars", str(observation_chars)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    with out.open("ab") as fh:
        fh.write(b'{"id": "broken", "messages": [\xff\xfe\n')
    return out


def _trained(folder: Path) -> bool:
    """Whether a saved LoRA adapter moved away from its initialisation (peft starts every lora_B at zero)."""
    return any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in _adapter(folder).items())


def _tiny(tmp_path: Path, sft_data: Path, out: str, **overrides) -> LMTrainConfig:
    """The shipped router's recipe at a tiny size: two SFT steps, one GRPO step, a checkpoint at every step (in fp32,
    as the recipe trains on the CPU)."""
    return load_train_config(ROOT / "configs" / "recipes" / "lm-router-sft.yaml", **{
        "tasks": [str(TASKS)], "eval_tasks": str(TASKS), "eval_limit": 2, "sft_data": str(sft_data), "sft_steps": 2,
        "sft_min_score": 0.0, "steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "max_turns": 1,
        "save_steps": 1, "out_dir": str(tmp_path / out), "registry": str(ROOT / "configs" / "registry-nolm.yaml"),
        **overrides})


def _adapter(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def test_shrunken_cpu_recipe_learns_saves_an_adapter_evaluates_and_resumes(tmp_path):
    """configs/recipes/lm-router-sft.yaml end to end at a tiny size (plus two GRPO steps): a damaged trajectory line
    is named and skipped, SFT and GRPO change the adapter, and the saved router loads as a policy with the prompt
    limits it was trained with and the ranker its `order` names.
    The same warm start killed (SIGKILL) after its first checkpoint and started again resumes there: the same
    second-step loss (same data order) and the same adapter as the run never interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from dataclasses import asdict, replace

    import yaml

    from maestro_graph.policy import make_policy
    from maestro_graph.training.rl.trl_train import train_lm

    sft_data = _export(tmp_path, 60, 160)
    config = _tiny(tmp_path, sft_data, "run", eval_steps=1, steps=2, order="neural")
    summary = train_lm(config, progress=False)
    assert [p.split(":")[0] for p in summary["sft_lines_skipped"]] == ["line 3"]
    assert all(summary[k]["items"] == 2 for k in ("before", "after_sft", "after"))
    assert _trained(tmp_path / "run" / "sft-final") and _trained(tmp_path / "run" / "final")
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").stat().st_size < 10_000_000
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert {"sft", "grpo"} == {h["phase"] for h in log}
    assert any("rewards/valid_actions/mean" in h and "completions/mean_length" in h for h in log)
    # validation during GRPO (the callback at step 1), and the last checkpoint's figure is the final evaluation's
    validation = [(h["step"], h["validation/accuracy"]) for h in log if "validation/accuracy" in h]
    assert [step for step, _ in validation] == [1, 2] and validation[-1][1] == summary["after"]["accuracy"]
    assert (tmp_path / "run" / "reward_curve.png").is_file()
    # several runs in one figure (scripts/plot_lm_runs.py): here the same run twice
    plotted = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_lm_runs.py"), str(tmp_path / "run"),
                              str(tmp_path / "run"), "--out", str(tmp_path / "runs.png")],
                             capture_output=True, text=True)
    assert plotted.returncode == 0, plotted.stderr
    assert (tmp_path / "runs.png").stat().st_size > 10_000
    policy = make_policy(f"lm:transformers:{tmp_path / 'run' / 'final'}#choice")
    assert (policy.prompt.card_chars, policy.prompt.observation_chars) == (60, 160) and policy.prompt.numbered
    assert policy.ranker.name == "neural"
    assert policy.backend._adapter == str(tmp_path / "run" / "final")

    # the warm start alone (no GRPO), without evaluations: neither changes what the SFT phase writes
    again = replace(config, out_dir=str(tmp_path / "again"), eval_tasks=None, eval_steps=0, steps=0)
    (tmp_path / "again.yaml").write_text(yaml.safe_dump(asdict(again)))
    child = subprocess.Popen([sys.executable, "-m", "maestro_graph.doors.cli", "train-lm", "--config",
                              str(tmp_path / "again.yaml")], cwd=tmp_path, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "again" / "sft" / "checkpoint-1" / "trainer_state.json"
    deadline = time.monotonic() + 300
    while not first.is_file() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert child.poll() is None, "the run to interrupt ended before its first checkpoint"
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert first.is_file() and not (tmp_path / "again" / "final").exists()
    resumed = train_lm(again, progress=False)
    losses = [[h["loss"] for h in s["sft_history"] if "loss" in h] for s in (summary, resumed)]
    assert len(losses[1]) == 2 and losses[1] == pytest.approx(losses[0], abs=1e-5)
    ours, theirs = _adapter(tmp_path / "run" / "sft-final"), _adapter(tmp_path / "again" / "final")
    assert ours.keys() == theirs.keys()
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-6) for k in ours)


def test_gpu_config_code_path_runs_one_step_on_cpu_with_the_tiny_model(tmp_path):
    """configs/train-lm-gpu.yaml (free generation, gradient checkpointing, its extra GRPO args) with only the sizes,
    the model (a tiny random SmolLM2: this checks the code path, not learning) and the generation backend
    substituted: a config or TRL API drift fails here, not on a GPU."""
    from maestro_graph.training.rl.trl_train import train_lm

    config = load_train_config(ROOT / "configs" / "train-lm-gpu.yaml", model=str(build_tiny_llama(tmp_path / "tiny")),
                               tasks=[str(TASKS)], eval_tasks=str(TASKS), eval_limit=1, steps=1, num_generations=2,
                               per_device_train_batch_size=2, gradient_accumulation_steps=1,
                               use_vllm=False, use_cpu=True,
                               registry=str(ROOT / "configs" / "registry-nolm.yaml"), out_dir=str(tmp_path / "run"))
    assert config.constrained is None and config.gradient_checkpointing
    summary = train_lm(config, progress=False)
    assert summary["before"]["items"] == summary["after"]["items"] == 1
    # one optimiser step ran on rollouts generated freely (a group whose rewards are equal moves no weight: the
    # CPU recipe's test asserts that training changes them)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    steps = [h for h in log if "rewards/format_errors/mean" in h]
    assert len(steps) == 1 and steps[0]["step"] == 1 and "completions/mean_length" in steps[0]
    assert (tmp_path / "run" / "final" / "adapter_config.json").is_file()  # the recipe trains a LoRA adapter


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
def test_a_gpu_run_without_a_gpu_is_refused_by_name_before_anything_loads(tmp_path):
    from maestro_graph.training.rl.trl_train import train_lm

    config = _tiny(tmp_path, TASKS, "run", use_cpu=False)
    with pytest.raises(ConfigError, match="field 'use_cpu': use_cpu is false but there is no GPU") as info:
        train_lm(config, progress=False)
    assert info.value.field == "use_cpu" and not (tmp_path / "run" / "summary.json").exists()


def test_every_local_model_loads_without_hub_kernels():
    """transformers (5.25) loads a model with `use_kernels` on by default and, on a GPU, fetches kernels from the
    Hugging Face Hub: offline that is a ValueError before training starts (seen on the GPU machine). The chat
    model loader, the router loader (the LM router's and the trainer's, in the trainer's dtype) and the sentence
    encoder all turn it off."""
    from maestro_graph.backends.hf import load_causal_lm, load_router_lm
    from maestro_graph.features import embeddings

    folder = str(cached_hf_folder())
    assert load_causal_lm(folder, device="cpu")[1].use_kernels is False
    router = load_router_lm(folder, device="cpu", dtype=torch.bfloat16)[1]
    assert router.use_kernels is False and router.dtype == torch.bfloat16
    embeddings.embed(["a question"])
    assert embeddings._get_encoder().bert.use_kernels is False
