"""`maestro predict --executor ray:ADDRESS` whose only worker node is lost mid-run gives up after
`--worker-wait-s` with no live worker, instead of waiting forever: the records that finished stay in the prediction
file, the exit status is 4 (PredictExit.LOST_CAPACITY) and the message says how many items ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from services import kill_node, ray_cluster, ray_env, ray_node
from test_cluster import _NODE_HEALTH, _own_registry
from test_scale import BARCODE_TASKS

MAESTRO = Path(sys.executable).parent / "maestro"
WAIT_S = 45
"""Longer than a worker takes to start here (placed and building its registry, it is not yet alive for the bound)."""


@pytest.mark.slow  # a head without CPUs and one worker node (about 10 s to start), one predict run of about a minute
def test_losing_the_only_worker_node_ends_the_run_after_the_wait(tmp_path, monkeypatch):
    for name, value in _NODE_HEALTH.items():  # the head notices the lost node in seconds
        monkeypatch.setenv(name, value)
    inside, gate = tmp_path / "inside", tmp_path / "gate"
    inside.mkdir()
    registry = _own_registry(tmp_path, inside=str(inside), gate=str(gate))
    out = tmp_path / "predictions.jsonl"
    every = [json.loads(line)["id"] for line in BARCODE_TASKS.read_text().splitlines()]
    with ray_cluster(num_cpus=0) as address, ray_node(address, num_cpus=1) as only:
        proc = subprocess.Popen([str(MAESTRO), "predict", "-t", str(BARCODE_TASKS), "-o", str(out), "-p",
                                 "fixed:zxing@@barcode-reading", "--workers", "1", "--no-cache", "--registry",
                                 str(registry), "--executor", f"ray:{address}", "--worker-wait-s", str(WAIT_S)],
                                env={**os.environ, **ray_env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        deadline = time.monotonic() + 180
        while not any(inside.iterdir()):  # the worker is inside its first item
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.05)
        gate.touch()
        while not (out.exists() and out.read_text().count("\n") >= 1):  # one item ran: close the gate again
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.01)
        gate.unlink()
        time.sleep(0.5)  # the worker waits at the gate inside a later item
        kill_node(only)
        killed = time.monotonic()
        output = proc.communicate(timeout=180)[0]
    ended_s = time.monotonic() - killed
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert proc.returncode == 4, output[-3000:]  # PredictExit.LOST_CAPACITY
    assert 1 <= len(records) < len(every) and {r["id"] for r in records} < set(every)
    assert all(r["error"] is None for r in records)
    assert f"(--worker-wait-s {WAIT_S}), so the run gave up: {len(records)} of {len(every)} items ran" in output, \
        output[-3000:]
    assert "rerun with --resume to run the rest" in output
    assert ended_s < WAIT_S + 30, f"the run ended {ended_s:.1f} s after its only node was lost"
