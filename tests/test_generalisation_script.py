"""scripts/generalisation.py end to end at toy size (one GRPO step, three items): it trains with the barcode family
held out, evaluates the checkpoint without and with it, and writes the table, the JSON and the plot."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import REAL
from servers import ROOT, server_env

from maestro_graph.operations.reliability.suite import fault_registry

pytestmark = pytest.mark.slow


def test_the_benchmark_writes_its_table(tmp_path):
    for area in ("barcode", "vision"):
        shutil.copytree(REAL / area, tmp_path / area)
    registry = fault_registry(tmp_path, None)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "generalisation.py"), "--train",
                          str(tmp_path / "vision" / "tasks.jsonl"), "--tasks",
                          str(tmp_path / "barcode" / "tasks.jsonl"), "--out", str(out), "--experiments", "barcode",
                          "source:zxing_barcodes", "--seeds", "0", "1", "--ensemble", "--steps", "1",
                          "--num-generations", "2", "--tasks-per-step", "2", "--limit", "3", "--registry",
                          str(registry),
                          "--cache-dir", str(tmp_path / "cache"), "--profile", "--workers", "1"],
                         env=server_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads((out / "results.json").read_text())
    assert [(r["experiment"], r["seed"]) for r in rows] == [
        ("barcode", 0), ("barcode", 1), ("barcode", "ensemble"),
        ("source:zxing_barcodes", 0), ("source:zxing_barcodes", 1), ("source:zxing_barcodes", "ensemble")]
    # the two seeds' checkpoints deciding together were evaluated as one policy
    together = json.loads((out / "barcode" / "ensemble" / "after" / "results.json").read_text())["policies"]
    assert any("+" in name and name.startswith("neural:") for name in together)
    assert rows[0]["items"] == 3 and rows[0]["profiled"]
    # every pair of the registry with the readers back was profiled on the training items, the readers included
    profile = json.loads((out / "barcode" / "profile.json").read_text())
    pairs = {e["pair"]: e for e in profile["pairs"]}
    assert "zxing@@barcode-reading" in pairs and "opencv-vision@@counting" in pairs
    assert all(e["items"] == 12 for e in pairs.values())  # every item of the vision training file
    assert pairs["opencv-vision@@counting"]["family_items"] >= 1
    assert rows[0]["before"] == 0.0  # no barcode reader in the registry: nothing can read a barcode
    assert rows[0]["oracle_after"] > 0  # with the readers back, some pair reads them
    assert "| barcode | neural | yes | 0 | 3 |" in (out / "table.md").read_text()
    assert rows[0]["domain"] == "barcode" and rows[0]["domains_before"] == {"barcode": 0.0}
    assert (out / "generalisation.png").stat().st_size
    # leave one source out: one evaluation (the registry is the same), beside knn and classifier fitted on the
    # same training items (none of the held-out source's)
    loso = rows[3]
    assert loso["before"] == loso["after"] and {"knn", "classifier"} <= set(loso)
    assert not (out / "source:zxing_barcodes" / "seed0" / "before").exists()
    assert loso["chance"] == 0.0  # free-form barcode answers: a guess scores nothing
    table = (out / "table.md").read_text()
    assert "Leave-one-source-out, seed 0, macro over 1 held-out sources: neural" in table
    assert "Leave-one-source-out, seed ensemble, macro over 1 held-out sources: neural" in table


def test_the_lm_router_trains_without_the_held_out_cards_and_meets_them_after(tmp_path):
    """--router lm at toy size (one SFT step, no GRPO): the warm start imitates the teacher's episodes rendered from
    the held-out registry, so no barcode card reaches the router before it is evaluated with the readers added; the
    neural policy that ranks its options (the recipe's `order: neural`) is trained on the held-out registry too."""
    for area in ("barcode", "vision"):
        shutil.copytree(REAL / area, tmp_path / area)
    registry = fault_registry(tmp_path, None)
    train, out = tmp_path / "vision" / "tasks.jsonl", tmp_path / "out"
    teacher = tmp_path / "teacher.jsonl"
    env = server_env()
    cli = [sys.executable, "-m", "maestro_graph.doors.cli"]
    predict = subprocess.run([*cli, "predict", "-t", str(train), "-o", str(teacher), "--policy",
                              "fixed:opencv-vision@@counting", "--registry", str(registry), "--max-turns", "1",
                              "--limit", "3"],
                             env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert predict.returncode == 0, predict.stderr[-2000:]
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "generalisation.py"), "--router", "lm",
                          "--teacher", str(teacher), "--train", str(train),
                          "--tasks", str(tmp_path / "barcode" / "tasks.jsonl"),
                          "--out", str(out), "--experiments", "barcode", "--seeds", "0", "--limit", "2",
                          "--max-turns", "1", "--registry", str(registry), "--cache-dir", str(tmp_path / "cache"),
                          "--lm-config", str(ROOT / "configs" / "recipes" / "lm-router-sft.yaml"),
                          "--lm-set", "sft_steps=1",
                          "steps=0", "sft_min_score=0", "per_device_train_batch_size=2", "num_generations=2",
                          "max_turns=1",
                          "--steps", "1", "--tasks-per-step", "1", "--num-generations", "2"],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    sft = [json.loads(line) for line in
           (out / "barcode" / "seed0" / "train" / "sft_data.jsonl").read_text().splitlines()]
    assert sft and not any("barcode" in m["content"] for r in sft for m in r["messages"])
    assert (out / "barcode" / "seed0" / "train" / "final" / "adapter_model.safetensors").is_file()
    # the recipe ranks by a neural policy: one is trained on the held-out registry too, and the router ranks by it
    ranked = yaml.safe_load((out / "barcode" / "seed0" / "final-ranked-by-neural" / "router.yaml").read_text())
    assert ranked["order"].startswith("neural:") and str(out / "barcode" / "seed0" / "ranker") in ranked["order"]
    [row] = json.loads((out / "results.json").read_text())
    assert (row["router"], row["items"], row["before"]) == ("lm", 2, 0.0)
    assert row["oracle_after"] > 0
