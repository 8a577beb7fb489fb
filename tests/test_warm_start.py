"""The full-information warm start from measured pair outcomes: action values, a policy that moves toward the valuable
actions, and a trainer that runs it once before GRPO (resume does not repeat it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from maestro_graph.cache import ExpertCache
from maestro_graph.executors import ThreadExecutor
from maestro_graph.policy.base import ActionSpace
from maestro_graph.policy.neural import NeuralConfig, NeuralPolicy
from maestro_graph.registry import Registry
from maestro_graph.rl.grpo import GRPOConfig, GRPOTrainer
from maestro_graph.rl.warm_start import measure_steps, valued_decisions, warm_start
from maestro_graph.tasks import load_tasks
from maestro_graph.types import Answer, Invoke

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """Three items with a right pair each and one no pair answers, on the real experts (no LM), measured once."""
    folder = tmp_path_factory.mktemp("warm")
    shutil.copy(ROOT / "examples" / "circles.png", folder / "circles.png")
    shutil.copy(ROOT / "examples" / "qrcode.png", folder / "qr.png")
    rows = [
        {"id": "c1", "question": "How many circles are in the image?", "images": ["circles.png"], "answer": "7",
         "answer_type": "number"},
        {"id": "q1", "question": "What is the value encoded in this code?", "images": ["qr.png"],
         "answer": "Wikipedia", "answer_type": "text"},
        {"id": "c2", "question": "Count the circles.", "images": ["circles.png"], "answer": "7",
         "answer_type": "number"},
        {"id": "n1", "question": "Which painter made this picture?", "images": ["circles.png"],
         "answer": "Kandinsky", "answer_type": "text"},
    ]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tasks, _ = load_tasks(folder / "train.jsonl")
    registry = Registry.load(cache=ExpertCache(folder / "cache")).without(models={"smollm2"})
    measured = measure_steps(registry, tasks, ThreadExecutor(registry), progress=False)
    return folder, tasks, registry, measured


def _expected_values(policy, tasks, registry, measured, config):
    """Mean expected value of the policy's distributions over every valued decision (full registry, real cards)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for task, steps in zip(tasks, measured):
            for decision in valued_decisions(task, steps, registry, config):
                scored = policy.score(decision.view, ActionSpace.build(registry, decision.view))
                total += sum(float(p) * decision.values.get(a, 0.0) for a, p in zip(scored.actions, scored.probs))
                count += 1
    return total / count


@pytest.mark.slow
def test_action_values_come_from_the_measured_steps(setting):
    _, tasks, registry, measured = setting
    config = GRPOConfig(cost_weight=0.1)
    qr = tasks[1]
    first, *after = valued_decisions(qr, measured[1], registry, config)
    assert not first.view.steps and set(first.values) == {Invoke(*p.split("@@")) for p in registry.pair_ids()}
    zxing = Invoke("zxing", "barcode-reading")
    assert first.values[zxing] == pytest.approx(1 - 0.1 * measured[1]["zxing@@barcode-reading"].cost)
    assert all(v <= 0 for a, v in first.values.items() if a.skill != "barcode-reading")
    # after the right reader: answering its candidate is worth 1, a further call its cost less (at best)
    after_zxing = next(d for d in after if d.view.steps[0].pair == "zxing@@barcode-reading")
    assert after_zxing.values[Answer("Wikipedia")] == 1.0
    for action, value in after_zxing.values.items():
        if isinstance(action, Invoke):
            assert value <= 1.0 - 0.1 * measured[1][action.pair].cost + 1e-6, action
    # an item no pair answers: after any call, answering is worth more than any call that costs anything
    for decision in valued_decisions(tasks[3], measured[3], registry, config)[1:]:
        for action, value in decision.values.items():
            cost = measured[3][action.pair].cost if isinstance(action, Invoke) else 0.0
            assert value == pytest.approx(-0.1 * cost), action


@pytest.mark.slow
def test_warm_start_raises_the_expected_value_of_the_decisions(setting):
    _, tasks, registry, measured = setting
    config = GRPOConfig(warm_start_steps=40, tasks_per_step=4, cost_weight=0.1, registry_dropout=0.0,
                        paraphrase_prob=0.0, seed=1)
    policy = NeuralPolicy(NeuralConfig(seed=1))
    before = _expected_values(policy, tasks, registry, measured, config)
    history = warm_start(policy, registry, tasks, config, ThreadExecutor(registry), progress=False)
    after = _expected_values(policy, tasks, registry, measured, config)
    assert len(history) == 40 and {"first_value", "later_value", "loss"} <= set(history[0])
    assert after > before + 0.2, (before, after)
    # the QR item's first decision now goes to a barcode reader
    first = valued_decisions(tasks[1], measured[1], registry, config)[0]
    action = policy.distribution(first.view, ActionSpace.build(registry, first.view)).greedy()
    assert isinstance(action, Invoke) and action.skill == "barcode-reading"


@pytest.mark.slow
def test_the_trainer_warm_starts_once_then_runs_grpo(setting, tmp_path):
    folder, tasks, registry, _ = setting
    config = GRPOConfig(warm_start_steps=3, steps=1, tasks_per_step=2, group_size=2, checkpoint_every=1, seed=2)
    trainer = GRPOTrainer(registry, tasks, config, tmp_path / "run")
    initial = {k: v.clone() for k, v in trainer.policy.net.state_dict().items()}
    trainer.train(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["warm_step"] for r in log if r.get("phase") == "warm-start"] == [1, 2, 3]
    assert [r["step"] for r in log if "reward" in r] == [1]
    assert any(not torch.equal(initial[k], v) for k, v in trainer.policy.net.state_dict().items())
    longer = GRPOTrainer(registry, tasks, GRPOConfig(**{**config.__dict__, "steps": 2}), tmp_path / "run")
    assert longer.resume() and longer.warm_started and longer.step == 1
    longer.train(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert sum(r.get("phase") == "warm-start" for r in log) == 3, "resuming repeated the warm start"
    assert [r["step"] for r in log if "reward" in r] == [1, 2]
