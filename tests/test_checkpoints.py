"""Checkpoints are data, never code: safetensors plus a JSON header, every field checked on loading."""

from __future__ import annotations

import json
import pickle
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from maestro_graph.core.tasks import Task
from maestro_graph.errors import ConfigError
from maestro_graph.operations.reliability.target import PlantedPickle
from maestro_graph.policy import make_policy
from maestro_graph.policy.base import ActionSpace, EpisodeView
from maestro_graph.policy.neural import (
    NeuralConfig,
    NeuralPolicy,
    read_checkpoint_header,
    read_tensor_file,
    write_tensor_file,
)
from maestro_graph.training.rl.grpo import NeuralGRPOConfig, NeuralGRPOTrainer
from maestro_graph.types import Step

ROOT = Path(__file__).resolve().parents[1]
CIRCLES = str(ROOT / "examples" / "circles.png")


def _plant(path: Path, marker: Path, how: str) -> Path:
    """A planted pickle at `path`, raw or in torch's zip container (a real `.pt` is the latter)."""
    if how == "pickle":
        path.write_bytes(pickle.dumps({"format": "maestro-neural-1", "net": PlantedPickle(marker)}))
    else:
        torch.save({"format": "maestro-neural-1", "net": PlantedPickle(marker)}, path)
    assert not marker.exists()
    return path


def _write(path: Path, policy: NeuralPolicy, tensors: dict | None = None, **header) -> Path:
    """A checkpoint as `save` writes it, with some header fields or tensors replaced."""
    write_tensor_file(path, policy.net.state_dict() if tensors is None else tensors,
                      {**policy.checkpoint_header(), **header})
    return path


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
@pytest.mark.parametrize("name", ["policy.safetensors", "best.safetensors", "neural.pt"])
def test_a_planted_pickle_is_refused_and_never_run(tmp_path, name, how):
    marker = tmp_path / "pwned"
    path = _plant(tmp_path / name, marker, how)
    with pytest.raises(ConfigError, match="not a safetensors checkpoint") as info:
        NeuralPolicy.load(path)
    assert name in str(info.value)
    with pytest.raises(ConfigError):
        make_policy(f"neural:{path}")
    with pytest.raises(ConfigError):
        read_checkpoint_header(path)
    assert not marker.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path, value):
    """A diverged run's NaN checkpoint once loaded, and then every episode failed while the run exited 0."""
    policy = NeuralPolicy()
    with torch.no_grad():
        policy.net.stop[2].bias[0] = value
    policy.save(tmp_path / "p.safetensors")
    with pytest.raises(ConfigError, match="NaN or infinite") as info:
        NeuralPolicy.load(tmp_path / "p.safetensors")
    assert info.value.field == "stop.2.bias"


def test_an_unknown_config_key_is_named_not_a_type_error(tmp_path):
    policy = NeuralPolicy()
    path = _write(tmp_path / "p.safetensors", policy, config={**asdict(policy.config), "dropout": 0.1})
    with pytest.raises(ConfigError, match="unknown config key 'dropout'") as info:
        NeuralPolicy.load(path)
    assert info.value.field == "config.dropout" and "p.safetensors" in str(info.value)
    path = _write(tmp_path / "q.safetensors", policy, config={"hidden": "128", "seed": 0})
    with pytest.raises(ConfigError, match="not a int") as info:
        NeuralPolicy.load(path)
    assert info.value.field == "config.hidden"


def test_foreign_headers_and_tensors_that_do_not_fit_are_refused(tmp_path):
    policy = NeuralPolicy()
    weights = policy.net.state_dict()
    cases = {
        "format": dict(format="maestro-neural-1"),
        "version": dict(version=3),
        "embedding": dict(embedding={"model": "all-mpnet-base-v2", "dim": 768}),
        "features.history_dim": dict(features={**policy.checkpoint_header()["features"], "history_dim": 9}),
        "stop.2.bias": dict(tensors={k: v for k, v in weights.items() if k != "stop.2.bias"}),
        "extra.weight": dict(tensors={**weights, "extra.weight": torch.zeros(2)}),
        "cand.0.weight": dict(tensors={**weights, "cand.0.weight": torch.zeros(3, 3)}),
        "skill_cos": dict(tensors={**weights, "skill_cos": weights["skill_cos"].double()}),
    }
    for field, change in cases.items():
        path = _write(tmp_path / f"{field}.safetensors", policy, **change)
        with pytest.raises(ConfigError) as info:
            NeuralPolicy.load(path)
        assert info.value.field == field and str(path) in str(info.value), (field, str(info.value))
    write_tensor_file(tmp_path / "trainer.safetensors", weights, {"format": "maestro-grpo-state-1"})
    with pytest.raises(ConfigError, match="not a maestro-neural checkpoint"):
        NeuralPolicy.load(tmp_path / "trainer.safetensors")


def test_round_trip_gives_the_same_weights_distributions_and_header(tmp_path, registry):
    policy = NeuralPolicy(NeuralConfig(hidden=32, seed=7))
    validation = {"step": 3, "val_score": 0.5}
    path = tmp_path / "out" / "best.safetensors"
    policy.save(path, extra={"validation": validation})
    loaded = NeuralPolicy.load(path)
    assert loaded.config == policy.config
    for name, value in policy.net.state_dict().items():
        assert torch.equal(value, loaded.net.state_dict()[name]), name
    view = EpisodeView("How many circles are in the image?", (CIRCLES,), None,
                       (Step(model="opencv-vision", skill="counting", answer="7", confidence=0.9),), 4, 10.0)
    space = ActionSpace.build(registry, view)
    a, b = policy.distribution(view, space), loaded.distribution(view, space)
    assert a.actions == b.actions and (a.probs == b.probs).all()
    assert read_checkpoint_header(path)["extra"] == {"validation": validation}
    assert not list(path.parent.glob("*.tmp")) and path.stat().st_mode & 0o044  # written whole, readable by others


def test_the_trainer_resumes_from_data_only(tmp_path, registry):
    """The resume state is safetensors too: a planted pickle under its name is refused unrun."""
    tasks = [Task(id="c1", question="How many circles?", images=[CIRCLES], answer="7", answer_type="number")]
    trainer = NeuralGRPOTrainer(registry, tasks, NeuralGRPOConfig(steps=1), tmp_path / "run")
    marker = tmp_path / "pwned"
    _plant(trainer.checkpoint_path, marker, "pickle")
    with pytest.raises(ConfigError, match="not a safetensors checkpoint"):
        trainer.resume()
    assert not marker.exists()
    trainer.checkpoint_path.unlink()
    trainer.save()  # what resume reads back is plain data: JSON header, tensors
    header, tensors = read_tensor_file(trainer.checkpoint_path)
    assert header["format"] == "maestro-grpo-state-1" and json.dumps(header)
    assert {k.partition(".")[0] for k in tensors} == {"net", "average"}  # no Adam moments before the first step
    assert trainer.resume() and trainer.step == 0
