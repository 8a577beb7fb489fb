"""A snapshot of one neural GRPO step: on a fixed seed the step's statistics and the updated weights match those
recorded in tests/data/grpo_step_snapshot.json (per tensor its sum, its norm and its first values). It catches any
change to what a step does, intended or not; tests/test_grpo_update.py says whether an update goes the right way.
When a change is meant to alter the step, rewrite the snapshot with the same setup and say why in the commit that
does."""

from __future__ import annotations

import json

import pytest
from conftest import DATA, REAL

from maestro_graph.core.tasks import load_tasks
from maestro_graph.operations.reliability.suite import fault_registry
from maestro_graph.registry import Registry
from maestro_graph.training.rl.grpo import NeuralGRPOConfig, NeuralGRPOTrainer


@pytest.mark.slow
def test_one_grpo_step_matches_its_snapshot(tmp_path):
    reference = json.loads((DATA / "grpo_step_snapshot.json").read_text())
    registry = Registry.load(fault_registry(tmp_path, None))
    tasks = load_tasks(REAL / "barcode" / "tasks.jsonl")[0]  # free-form items: no choice or yes/no fallback applies
    config = NeuralGRPOConfig(steps=1, tasks_per_step=6, num_generations=6, hidden=16, seed=3, num_iterations=2,
                              save_steps=1, cost_weight=0.05, advantage_std_floor=0.1)
    trainer = NeuralGRPOTrainer(registry, tasks, config, tmp_path / "out")
    stats = trainer.train_step()
    assert {k: stats[k] for k in reference["stats"]} == pytest.approx(reference["stats"])
    assert stats["decisions"] > 0 and stats["skipped_groups"] < stats["groups"]  # the step did update the weights
    for name, tensor in trainer.policy.net.state_dict().items():
        expected = reference["tensors"][name]
        values = tensor.double()
        assert float(values.sum()) == pytest.approx(expected["sum"], abs=1e-5), name
        assert float(values.norm()) == pytest.approx(expected["norm"], abs=1e-5), name
        assert [float(x) for x in values.flatten()[:4]] == pytest.approx(expected["head"], abs=1e-6), name
