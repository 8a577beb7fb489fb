"""The skeleton the experiment scripts share (scripts/cost_sweep.py, scripts/generalisation.py): train a neural
policy (resumable: rerunning the script continues the run) and evaluate policies on task files into a folder, with
the same report `maestro eval` writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...core.tasks import Task
from ...episode.context import MaestroContext
from ...registry import Registry
from ..evaluation.evaluate import evaluate
from ..evaluation.report import write_report
from .config import NeuralGRPOConfig
from .grpo import NeuralGRPOTrainer

__all__ = ["evaluate_into", "train_resumable"]


def train_resumable(registry: Registry, tasks: list[Task], config: NeuralGRPOConfig, out_dir: Path) -> str:
    """Train (or continue training) under `out_dir`; returns the trained policy's name, `neural:PATH`."""
    trainer = NeuralGRPOTrainer(registry, tasks, config, out_dir)
    trainer.resume()
    trainer.train()
    return f"neural:{trainer.policy_path}"


def evaluate_into(out_dir: Path, registry: Registry, task_files: list[Path], policies: list[str], *,
                  select: Callable[[Task], bool] | None = None, limit: int | None = None,
                  context: MaestroContext | None = None, train_items: list[Task] | None = None) -> dict:
    """Every policy on the same items (those of `task_files` that `select` keeps, up to `limit`, with the budgets of
    `context`; the trained routers fitted on `train_items`): predictions, results.json, report.md and plots under
    `out_dir`."""
    run = evaluate(registry, task_files, policies, predictions_dir=out_dir / "predictions", select=select,
                   limit=limit, context=context, train_items=train_items or ())
    return write_report(run, out_dir)
