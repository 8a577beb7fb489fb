"""One GRPO step on a fixed seed gives the update it gave before the trajectory refactor (the trainer now reads the
decisions the graph recorded instead of re-deriving them). tests/data/grpo_step_reference.json was written by the
same setup from the tree of commit 5a2d9a3, before the change: per tensor its sum, its norm and its first values.
Rewritten once since, by the same setup, when the network gained the pairs' accuracy inputs and priors (profiles;
other initial weights, so another update: rewards and accuracy of the step unchanged, 32 decisions instead of 33),
and once more when the action space began to leave out pairs whose skill declines the question (the barcode items'
questions no longer offer counting or arithmetic: reward and accuracy unchanged, 29 decisions instead of 32), and
once more after the session that hardened the doors and added vision-chat skills (issue 33, 35): the mean reward and
accuracy of the step are unchanged (0.6638, 0.667), but in two groups some episodes now make one more 0.05-cost
call, so 2 groups carry signal that did not (59 decisions instead of 29). The change that moved those samples was
not isolated (not the profiles, the counting/visual-math skills or the visual-qa folder; the unrunnable visual-qa
skill's extra random draws were one cause and are gone, rl.augment._runnable_skills)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA, REAL

from maestro_graph.core.tasks import load_tasks
from maestro_graph.registry import Registry
from maestro_graph.reliability.suite import fault_registry
from maestro_graph.rl.grpo import GRPOConfig, GRPOTrainer


@pytest.mark.slow
def test_one_grpo_step_matches_the_update_recorded_before_the_refactor(tmp_path):
    reference = json.loads((DATA / "grpo_step_reference.json").read_text())
    registry = Registry.load(fault_registry(tmp_path, None))
    tasks = load_tasks(REAL / "barcode" / "tasks.jsonl")[0]  # free-form items: no choice or yes/no fallback applies
    config = GRPOConfig(steps=1, tasks_per_step=6, group_size=6, hidden=16, seed=3, inner_epochs=2,
                        checkpoint_every=1, cost_weight=0.05, advantage_std_floor=0.1)
    trainer = GRPOTrainer(registry, tasks, config, tmp_path / "out")
    stats = trainer.train_step()
    assert {k: stats[k] for k in reference["stats"]} == pytest.approx(reference["stats"])
    assert stats["decisions"] > 0 and stats["skipped_groups"] < stats["groups"]  # the step did update the weights
    for name, tensor in trainer.policy.net.state_dict().items():
        expected = reference["tensors"][name]
        values = tensor.double()
        assert float(values.sum()) == pytest.approx(expected["sum"], abs=1e-5), name
        assert float(values.norm()) == pytest.approx(expected["norm"], abs=1e-5), name
        assert [float(x) for x in values.flatten()[:4]] == pytest.approx(expected["head"], abs=1e-6), name
