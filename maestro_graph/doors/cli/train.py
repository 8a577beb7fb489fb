"""`maestro train` and `maestro train-lm`: the two trainers, each configured by its config dataclass (every field
an option, or a key of --config FILE.yaml)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ...backends.packages import missing_package
from ...core.configs import typer_options
from ...errors import MaestroError, missing_extra
from ...training.rl.config import LMTrainConfig, NeuralGRPOConfig
from .common import console, err, fail, limit_threads
from .common import executor as open_executor
from .common import registry as load_registry
from .options import CacheDirOpt, CacheTtlOpt, CacheUrlOpt, ExecutorOpt

__all__ = ["train", "train_lm"]


@typer_options(NeuralGRPOConfig, flags={"registry": ("--registry", "-r")})
def train(
    config: NeuralGRPOConfig,
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False,
                                     help="Training task file (repeat)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for checkpoints, train_log.jsonl and curves.png."),
    eval_tasks: list[Path] = typer.Option([], exists=True, dir_okay=False,
                                          help="Validation task file (repeat): scored at every checkpoint; the best "
                                               "checkpoint is kept as OUT/best.safetensors."),
    resume: bool = typer.Option(True, help="Continue from OUT/checkpoint.safetensors when it exists."),
    cache_dir: Path = CacheDirOpt,
    cache_url: str | None = CacheUrlOpt,
    cache_ttl_s: int = CacheTtlOpt,
    executor: str = ExecutorOpt,
    workers: int = typer.Option(1, min=1, help="Rollout workers (groups sampled at once; with --executor ray, "
                                "Ray actors)."),
) -> None:
    """Train the neural policy with GRPO on task files; OUT/policy.safetensors is the result.

    The reward is the outcome alone. Every NeuralGRPOConfig field is an option (or a key of --config FILE.yaml),
    those TRL's GRPOConfig also has under TRL's names (--num-generations, --learning-rate, --epsilon,
    --num-iterations, --save-steps); the defaults, and configs/recipes/neural-grpo.yaml, are the shipped
    checkpoint's recipe."""
    limit_threads()
    import torch

    from ...core.tasks import load_task_files
    from ...training.rl.grpo import NeuralGRPOTrainer

    torch.set_num_threads(1)
    registry = Path(config.registry) if config.registry else None
    reg = load_registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
    items, problems = load_task_files(tasks)
    held_out, eval_problems = load_task_files(eval_tasks) if eval_tasks else ([], [])
    for problem in problems + eval_problems:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line}: {problem.error}")
    try:
        runner = open_executor(executor, reg, registry, cache_dir, cache_url, workers, cache_ttl_s)
        trainer = NeuralGRPOTrainer(reg, items, config, out, eval_tasks=held_out, executor=runner)
        if resume and trainer.resume():
            console.print(f"resuming from {trainer.checkpoint_path} at step {trainer.step}")
    except MaestroError as exc:
        fail(str(exc))
    start = time.perf_counter()
    trainer.train()
    console.print(f"trained {trainer.step} steps in {time.perf_counter() - start:.0f}s -> {trainer.policy_path} "
                  f"(curves: {out / 'curves.png'}, log: {out / 'train_log.jsonl'})")
    if trainer.best:
        console.print(f"best validation score {trainer.best['score']:.3f} at step {trainer.best['step']} -> "
                      f"{trainer.best_path}")


@typer_options(LMTrainConfig, flags={"tasks": ("--tasks", "-t"), "out_dir": ("--out-dir", "--out", "-o")})
def train_lm(config: LMTrainConfig) -> None:
    """Train the LM router with TRL: optional SFT warm start, then GRPO with episodes run through the graph.

    Every LMTrainConfig field is an option (or a key of --config FILE.yaml); configs/recipes/lm-router-sft.yaml is the
    shipped router's recipe."""
    limit_threads()
    if (module := missing_package("trl", "datasets")) is not None:
        fail(missing_extra("train", "`maestro train-lm`", module))
    from ...training.rl.trl_train import train_lm as run_training

    try:
        summary = run_training(config)
    except MaestroError as exc:
        fail(str(exc))
    for phase in ("before", "after_sft", "after"):
        if phase in summary:
            m = summary[phase]
            console.print(f"{phase}: accuracy {m['accuracy']:.3f} on {m['items']} items, "
                          f"{m['format_errors_per_episode']:.2f} format errors per episode")
    skipped = [*summary.get("sft_lines_skipped", []), *summary.get("sft_examples_skipped", []),
               *summary.get("rollout_problems", [])]
    if skipped:
        console.print(f"{len(skipped)} input problems skipped, cut or rejected (each named in summary.json), "
                      f"first: {skipped[0]}")
    console.print(f"trained in {summary['train_seconds']:.0f}s -> {summary['final_model']} "
                  f"(log, reward_curve.png, summary.json in {config.out_dir})")
