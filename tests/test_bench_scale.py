"""scripts/bench_scale.py's CPU-bound mode, the figures behind docs/scale.md's sizing, on the smallest workload: one
real table item each on threads and on a two-node loopback cluster whose worker node cannot see the task folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a two-node Ray cluster and three warmed-up workers loading the OCR models
def test_cpu_mode_measures_threads_against_a_two_node_cluster_on_the_same_records(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--mode", "cpu", "--workers", "1",
                           "--items", "1", "--task-files", str(ROOT / "tests/data/real/tables/tasks.jsonl"),
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    if "no two-node cluster here" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    threads, ray, warm = figures["runs"]
    assert [r["executor"] for r in figures["runs"]] == ["threads", "ray", "ray, cache warm"]
    assert ray["same_records"] and warm["same_records"]  # the images travelled to the node that cannot see them
    assert all(r["episodes"] == 1 and r["expert_calls_per_episode"] >= 1 for r in figures["runs"])
    # the workers' own CPU time: OCR costs CPU on the worker, not on the driver; a full cache removes it
    assert ray["worker_cpu_s"] > 5 * ray["driver_cpu_s"] and threads["worker_cpu_s"] > 0
    assert warm["worker_cpu_s"] < ray["worker_cpu_s"] / 2
    assert all(m > 100 for r in figures["runs"] for m in r["rss_mb"])  # a worker holds a registry and models
    assert "| ray | 1 | 1 |" in out.with_suffix(".md").read_text()
