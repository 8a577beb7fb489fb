"""The full-information warm start from measured pair outcomes: action values, a policy that moves toward the valuable
actions, and a trainer that runs it once before GRPO (resume does not repeat it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from maestro_graph.batch.executors import ThreadExecutor
from maestro_graph.batch.measure import measure_steps
from maestro_graph.cache.store import ExpertCache
from maestro_graph.core.tasks import load_tasks
from maestro_graph.policy.base import ActionSpace
from maestro_graph.policy.neural import NeuralConfig, NeuralPolicy
from maestro_graph.registry import Registry
from maestro_graph.training.rl.grpo import NeuralGRPOConfig, NeuralGRPOTrainer
from maestro_graph.training.rl.warm_start import valued_tree, warm_start
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
    measured = measure_steps(registry, tasks, executor=ThreadExecutor(registry), progress=False)
    return folder, tasks, registry, measured


@pytest.mark.slow
def test_action_values_come_from_the_measured_steps(setting):
    _, tasks, registry, measured = setting
    config = NeuralGRPOConfig(cost_weight=0.1)
    tree = valued_tree(tasks[1], measured[1], registry, config)
    assert not tree.first.view.steps
    assert set(tree.first.values) == set(tree.after) == {Invoke(*p.split("@@")) for p in registry.pair_ids()}
    zxing = Invoke("zxing", "barcode-reading")
    assert tree.call_cost[zxing] == pytest.approx(0.1 * measured[1]["zxing@@barcode-reading"].cost)
    assert tree.first.values[zxing] == pytest.approx(1 - tree.call_cost[zxing])
    assert all(v <= 0 for a, v in tree.first.values.items() if a.skill != "barcode-reading")
    # after the right reader: answering its candidate is worth 1, a further call its cost less (at best)
    after_zxing = tree.after[zxing]
    assert after_zxing.view.steps[0].pair == "zxing@@barcode-reading"
    assert after_zxing.values[Answer("Wikipedia")] == 1.0
    for action, value in after_zxing.values.items():
        if isinstance(action, Invoke):
            assert value <= 1.0 - 0.1 * measured[1][action.pair].cost + 1e-6, action
    # an item no pair answers: after any call, answering (or giving up) is worth 0, a call minus its cost
    for decision in valued_tree(tasks[3], measured[3], registry, config).after.values():
        for action, value in decision.values.items():
            cost = measured[3][action.pair].cost if isinstance(action, Invoke) else 0.0
            assert value == pytest.approx(-0.1 * cost), action


@pytest.mark.slow
def test_warm_start_raises_the_expected_value_and_learns_where_to_stop(setting):
    _, tasks, registry, measured = setting
    config = NeuralGRPOConfig(warm_start_steps=40, tasks_per_step=4, cost_weight=0.1, call_weight=0.05,
                              registry_dropout=0.0, paraphrase_prob=0.0, seed=1, stop_without_answer=True)
    policy = NeuralPolicy(NeuralConfig(seed=1, stop_without_answer=True))
    read = valued_tree(tasks[1], measured[1], registry, config).after[Invoke("zxing", "barcode-reading")]

    def p_stop_after_reading() -> float:
        dist = policy.distribution(read.view, ActionSpace.build(registry, read.view))
        return float(dist.probs[dist.actions.index(Answer("Wikipedia"))])

    before = p_stop_after_reading()
    history = warm_start(policy, registry, tasks, config, ThreadExecutor(registry), progress=False)
    assert len(history) == 40 and {"loss", "value", "stop_after_one"} <= set(history[0])
    # every step sees all four items through the full registry: the value is the policy's, and it rises (from 0.58:
    # an untrained skill head already leans to the skills whose pairs measured well on such questions; without that
    # prior it started at 0.29 and ended at 0.68)
    assert history[-1]["value"] > max(history[0]["value"] + 0.05, 0.65), (history[0], history[-1])
    tree = valued_tree(tasks[1], measured[1], registry, config)
    first = policy.distribution(tree.first.view, ActionSpace.build(registry, tree.first.view)).greedy()
    assert isinstance(first, Invoke) and first.skill == "barcode-reading"  # the QR item goes to a barcode reader
    # with a price per call, answering once the reader has read it became the likelier action
    assert p_stop_after_reading() > max(before, 0.5), (before, p_stop_after_reading())


@pytest.mark.slow
def test_the_trainer_warm_starts_once_then_runs_grpo(setting, tmp_path):
    folder, tasks, registry, _ = setting
    config = NeuralGRPOConfig(warm_start_steps=3, steps=1, tasks_per_step=2, num_generations=2, save_steps=1, seed=2)
    trainer = NeuralGRPOTrainer(registry, tasks, config, tmp_path / "run")
    initial = {k: v.clone() for k, v in trainer.policy.net.state_dict().items()}
    trainer.train(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["warm_step"] for r in log if r.get("phase") == "warm-start"] == [1, 2, 3]
    assert [r["step"] for r in log if "reward" in r] == [1]
    assert any(not torch.equal(initial[k], v) for k, v in trainer.policy.net.state_dict().items())
    longer = NeuralGRPOTrainer(registry, tasks, NeuralGRPOConfig(**{**config.__dict__, "steps": 2}), tmp_path / "run")
    assert longer.resume() and longer.warm_started and longer.step == 1
    longer.train(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert sum(r.get("phase") == "warm-start" for r in log) == 3, "resuming repeated the warm start"
    assert [r["step"] for r in log if "reward" in r] == [1, 2]
