"""scripts/generalisation.py end to end at toy size (one GRPO step, three items): it trains with the barcode family
held out, evaluates the checkpoint without and with it, and writes the table, the JSON and the plot."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import REAL
from maestro_graph.reliability import fault_registry
from servers import ROOT, server_env

pytestmark = pytest.mark.slow


def test_the_benchmark_writes_its_table(tmp_path):
    for area in ("barcode", "vision"):
        shutil.copytree(REAL / area, tmp_path / area)
    registry = fault_registry(tmp_path, None)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "generalisation.py"), "--train",
                          str(tmp_path / "vision" / "tasks.jsonl"), "--tasks", str(tmp_path / "barcode" / "tasks.jsonl"),
                          "--out", str(out), "--experiments", "barcode", "--seeds", "0", "--steps", "1",
                          "--group-size", "2", "--tasks-per-step", "2", "--limit", "3", "--registry", str(registry),
                          "--cache-dir", str(tmp_path / "cache")],
                         env=server_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads((out / "results.json").read_text())
    assert [r["experiment"] for r in rows] == ["barcode"] and rows[0]["items"] == 3
    assert rows[0]["before"] == 0.0  # no barcode reader in the registry: nothing can read a barcode
    assert rows[0]["oracle_after"] > 0  # with the readers back, some pair reads them
    assert "| barcode | 0 | 3 |" in (out / "table.md").read_text() and (out / "generalisation.png").stat().st_size
