"""Runs the LM router's vision recipe (configs/train-lm-gpu.yaml, shortened and swapped to the CPU as
tests/test_vlm_router.py does) on a tiny Qwen2.5-VL folder with transformers' own Qwen-VL processor, in the
environment that holds torchvision (`.venv-vllm/`, scripts/setup-vllm.sh), and prints what the model was fed as one
JSON line: test_vlm_router.py runs it with `.venv-vllm/bin/python` and checks it.

    python tests/qwen_vl_recipe.py MODEL_DIR TASKS SFT_DATA OUT_DIR REGISTRY

Recorded: the processor's class; the image grid it makes of each training task's image; every pass of the model
(how many image pad tokens its `input_ids` hold, whether gradients were on) and of its vision tower (the pixel rows
and grids it received); the phases logged; the adapter tensors after SFT and after GRPO. A recorder wraps the two
classes' `forward` for the run (the trainer loads its own copy of the model, so no instance is at hand)."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path


def _record(cls: type, note) -> None:
    forward = cls.forward

    @functools.wraps(forward)
    def recorded(self, *args, **kwargs):
        note(args, kwargs)
        return forward(self, *args, **kwargs)

    cls.forward = recorded


def main(model: str, tasks: str, sft_data: str, out_dir: str, registry: str) -> dict:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoProcessor
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen

    from maestro_graph.core.tasks import load_task_files
    from maestro_graph.images.load import load_images
    from maestro_graph.training.rl.trl_train import load_train_config, train_lm

    processor = AutoProcessor.from_pretrained(model)
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    items = load_task_files([Path(tasks)])[0][:2]
    grids = [processor.image_processor(load_images(tuple(t.images[:1])), return_tensors="pt")["image_grid_thw"]
             [0].tolist() for t in items]
    passes: list[dict] = []
    tower: list[dict] = []

    def model_pass(args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and (torch.is_grad_enabled() or kwargs.get("pixel_values") is not None):
            # the passes that read pixels (not each decoding step of a rollout): how many image tokens they hold
            passes.append({"image_tokens": int((ids == image_token).sum()), "grad": torch.is_grad_enabled(),
                           "pixels": kwargs.get("pixel_values") is not None})

    def tower_pass(args, kwargs) -> None:
        pixels = args[0] if args else kwargs["hidden_states"]
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        tower.append({"pixel_shape": list(pixels.shape), "grids": grid.tolist(), "grad": torch.is_grad_enabled()})

    _record(qwen.Qwen2_5_VLModel, model_pass)  # TRL's fused loss calls it, not the LM head
    _record(qwen.Qwen2_5_VisionTransformerPretrainedModel, tower_pass)
    config = load_train_config(
        Path(__file__).resolve().parents[1] / "configs" / "train-lm-gpu.yaml",
        model=model, use_cpu=True, use_vllm=False,  # what a CPU needs: no GPU, no vLLM
        tasks=[tasks], limit_tasks=2, eval_tasks=None, sft_data=sft_data, sft_steps=2, sft_min_score=0.0, steps=1,
        gradient_accumulation_steps=1, max_turns=1, max_new_tokens=32, out_dir=out_dir, registry=registry)
    summary = train_lm(config, progress=False)
    out = Path(out_dir)

    def adapter(folder: str) -> dict[str, float]:
        return {k: float(v.abs().sum()) for k, v in load_file(out / folder / "adapter_model.safetensors").items()}

    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return {"processor": type(processor).__name__, "image_processor": type(processor.image_processor).__name__,
            "merge_size": processor.image_processor.merge_size, "task_grids": grids, "passes": passes,
            "tower": tower, "phases": sorted({h["phase"] for h in log}), "sft_adapter": adapter("sft-final"),
            "final_adapter": adapter("final"), "skipped": summary["sft_examples_skipped"],
            "grpo_completion_length": next(h["completions/mean_length"] for h in log
                                           if "completions/mean_length" in h)}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
