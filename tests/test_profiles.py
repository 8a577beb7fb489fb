"""Structured card fields and expert profiling: optional facts on a card, `maestro registry profile` on a labelled
calibration file with the real barcode readers, and a profile that belongs to another registry or model version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.errors import ConfigError
from maestro_graph.policy import make_policy
from maestro_graph.registry import Registry

SKILLS = Path(__file__).resolve().parents[1] / "skills"
BARCODES = Path(__file__).parent / "data" / "real" / "barcode"


def _card(name: str, entry: str, **extra) -> dict:
    return {"name": name, "description": f"{name} barcode reader.", "capabilities": ["barcode"],
            "backend": {"type": "python", "entry": entry}, "cost": {"per_call": 0.05}, **extra}


ZXING = ("zxing", "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert")
OPENCV = ("opencv-barcode", "maestro_graph.experts.opencv_barcode:OpenCVBarcodeExpert")


def _registry_file(folder: Path, models: list[dict], **extra) -> Path:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(SKILLS)], "skills": ["barcode-reading", "barcode"],
                                    "models": models, **extra}))
    return path


def test_a_card_without_structured_fields_reads_them_as_unknown(tmp_path):
    registry = Registry.load(_registry_file(tmp_path, [_card(*ZXING)]))
    (pair,) = registry.pairs()
    card = pair.model
    assert card.formats is None and card.max_input_side is None and card.latency_s is None
    assert card.evaluations == [] and pair.profile is None and pair.accuracy is None


def test_structured_fields_are_read_and_a_reported_accuracy_reaches_the_pair(tmp_path):
    card = _card(*ZXING, formats=["png", "webp"], max_input_side=4096, latency_s=0.05,
                 evaluations=[{"family": "barcode-reading", "accuracy": 0.9, "source": "vendor report"}])
    (pair,) = Registry.load(_registry_file(tmp_path, [card])).pairs()
    assert pair.model.formats == ["png", "webp"] and pair.model.max_input_side == 4096
    assert pair.accuracy == pytest.approx(0.9)


@pytest.mark.parametrize("extra,field", [
    ({"evaluations": [{"family": "barcode-reading", "accuracy": 1.5, "source": "x"}]},
     "models.0.evaluations.0.accuracy"),
    ({"evaluations": [{"family": "barcode-reading", "accuracy": 0.5}]}, "models.0.evaluations.0.source"),
    ({"formats": ["png", "psd"]}, "models.0.formats.1"),
    ({"max_input_side": 0}, "models.0.max_input_side"),
    ({"latency_s": -1}, "models.0.latency_s"),
])
def test_a_bad_structured_field_is_a_config_error_naming_it(tmp_path, extra, field):
    with pytest.raises(ConfigError) as caught:
        Registry.load(_registry_file(tmp_path, [_card(*ZXING, **extra)]))
    assert caught.value.field == field and field in str(caught.value)


@pytest.fixture
def calibration(tmp_path) -> Path:
    """Four real barcode items and one bad line (no id), with their images copied next to the file."""
    lines = (BARCODES / "tasks.jsonl").read_text().splitlines()[:4]
    for line in lines:
        for image in json.loads(line)["images"]:
            (tmp_path / image).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(BARCODES / image, tmp_path / image)
    path = tmp_path / "calibration.jsonl"
    path.write_text("\n".join(lines[:2] + ['{"question": "no id"}'] + lines[2:]) + "\n")
    return path


def test_profiling_writes_each_pairs_outcome_and_policies_read_it(tmp_path, calibration):
    # the registry file already names its profile, not yet written: profiling writes it there
    reg_file = _registry_file(tmp_path, [_card(*OPENCV), _card(*ZXING)], profile="profile.json")
    out = tmp_path / "profile.json"
    result = CliRunner().invoke(app, ["registry", "profile", "--tasks", str(calibration), "--registry",
                                      str(reg_file), "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert f"{calibration}:3:id:Fieldrequired" in "".join(result.output.split())  # line named, the run went on
    profile = json.loads(out.read_text())
    entries = {e["pair"]: e for e in profile["pairs"]}
    assert set(entries) == {"zxing@@barcode-reading", "opencv-barcode@@barcode-reading"}
    assert all(e["items"] == 4 and e["family"] == "barcode-reading" for e in entries.values())
    assert entries["zxing@@barcode-reading"]["accuracy"] > entries["opencv-barcode@@barcode-reading"]["accuracy"]
    # the family accuracy counts only the items some reader got right, so it is at least the overall figure
    zxing = entries["zxing@@barcode-reading"]
    assert 0 < zxing["family_items"] <= 4 and zxing["family_accuracy"] >= zxing["accuracy"]
    assert zxing["family_accuracy"] > entries["opencv-barcode@@barcode-reading"]["family_accuracy"]

    profiled = Registry.load(_registry_file(tmp_path, [_card(*OPENCV), _card(*ZXING)], profile="profile.json"))
    accuracy = {p.id: p.accuracy for p in profiled.pairs()}
    assert accuracy["zxing@@barcode-reading"] == entries["zxing@@barcode-reading"]["family_accuracy"]
    # the rules find no keyword difference between the two readers: the profile breaks the tie, not card order
    episode = run_episode(build_graph(profiled, make_policy("rules")), "What is the value encoded in this barcode?",
                          [str(BARCODES / json.loads(calibration.read_text().splitlines()[0])["images"][0])])
    assert episode.steps[0].pair == "zxing@@barcode-reading"

    with pytest.warns(UserWarning, match=r"entry zxing@@barcode-reading ignored \(another model version"):
        bumped = Registry.load(_registry_file(tmp_path, [_card(*OPENCV), _card(*ZXING, version="2")],
                                              profile="profile.json"))
    assert {p.id: p.profile is not None for p in bumped.pairs()} == {
        "opencv-barcode@@barcode-reading": True, "zxing@@barcode-reading": False}

    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(out, other / "profile.json")
    with pytest.warns(UserWarning, match=rf"profile {other / 'profile.json'} belongs to another registry"):
        elsewhere = Registry.load(_registry_file(other, [_card("zxing", OPENCV[1])], profile="profile.json"))
    assert elsewhere.pairs()[0].profile is None


def test_a_missing_or_malformed_profile_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="no such profile file"):
        Registry.load(_registry_file(tmp_path, [_card(*ZXING)], profile="nope.json"))
    (tmp_path / "bad.json").write_text('{"version": 1, "pairs": []}')
    with pytest.raises(ConfigError) as caught:
        Registry.load(_registry_file(tmp_path, [_card(*ZXING)], profile="bad.json"))
    assert "bad.json" in str(caught.value) and "registry" in caught.value.field


ROOT = Path(__file__).resolve().parents[1]
SHIPPED_PROFILES = [ROOT / "maestro_graph" / "default_registry.profile.json",
                    ROOT / "configs" / "registry-nolm.profile.json"]
PROFILED_FONTS = "ae89cb66acc85f13"
"""The digest of the font file names, in order, that the shipped profiles' generated items were drawn with."""


@pytest.fixture(scope="module")
def recipe_features(tmp_path_factory):
    """The reach's features of the 42 generated items the shipped profiles' recipe makes (`maestro bench make --n 60
    --seed 0`, then `scripts/subset_tasks.py train.jsonl --per-domain 6 --exclude small-text`), as a profile computes
    them (`Reach.measure`); made once for both profiles."""
    import hashlib
    import subprocess
    import sys

    from maestro_graph.core.tasks import load_tasks
    from maestro_graph.operations.bench.generate import make_suite
    from maestro_graph.operations.bench.generate.base import font_paths
    from maestro_graph.registry.reach import Reach

    fonts = hashlib.sha256(" ".join(Path(p).name for p in font_paths()).encode()).hexdigest()[:16]
    if fonts != PROFILED_FONTS:  # the generator draws from the fonts a machine has
        pytest.skip(f"this machine's fonts (digest {fonts}) are not those the shipped items were made with")
    folder = tmp_path_factory.mktemp("bench")
    make_suite(folder, 60, 0, splits=("train",), progress=False)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "subset_tasks.py"), str(folder / "train.jsonl"),
                    "--per-domain", "6", "--exclude", "small-text"], check=True, capture_output=True)
    tasks = load_tasks(folder / "train-6.jsonl")[0]
    return Reach.measure([t.question for t in tasks], [list(t.images) for t in tasks], [t.options for t in tasks],
                         np.zeros((len(tasks), 0)), {}).features


@pytest.mark.parametrize("profile", SHIPPED_PROFILES, ids=lambda p: p.name)
def test_the_shipped_profiles_generated_rows_are_what_their_recipe_makes(profile, recipe_features):
    """The shipped profiles were measured on the real dev training half and on the recipe's 42 generated items. The
    real items are not in the repository; the generated ones are made again, so a generator change that alters them
    (which leaves the shipped reach describing items its recipe no longer makes) fails here, not months later."""
    from safetensors.numpy import load_file

    from maestro_graph.registry.reach import reach_path

    assert json.loads(profile.read_text())["calibration"].endswith("runs/bench/train-6.jsonl")
    shipped = load_file(reach_path(profile))["features"].astype(np.float32)[-len(recipe_features):]  # float16 rows
    assert len(recipe_features) == 42 and np.abs(recipe_features - shipped).max() < 2e-3
