"""A Ray cluster whose nodes share no disk: the worker node cannot see the task folder, so the images travel with
the work; a cluster smaller than `--workers` starts with what it has; a worker's warning reaches the driver's
terminal. Also: the deployment files a user applies (Dockerfile, KubeRay manifests, the job's runtime env) parse and
run the command this page documents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image
from services import ray_env, ray_two_nodes
from test_scale import BARCODE_TASKS, _barcode_registry, _records

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MAESTRO = Path(sys.executable).parent / "maestro"


def _task_folder(folder: Path) -> Path:
    """Four real barcode items and an animated copy of the first (two frames: loading it warns), in `folder`."""
    folder.mkdir()
    (folder / "images").mkdir()
    lines = BARCODE_TASKS.read_text().splitlines()[:4]
    tasks = [json.loads(line) for line in lines]
    for task in tasks:
        shutil.copy(BARCODE_TASKS.parent / task["images"][0], folder / task["images"][0])
    first = Image.open(folder / tasks[0]["images"][0]).convert("RGB")
    first.save(folder / "images" / "animated.gif", save_all=True, append_images=[first.rotate(180)])
    tasks.append({**tasks[0], "id": "animated", "images": ["images/animated.gif"]})
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return folder / "tasks.jsonl"


@pytest.mark.slow  # one two-node cluster start (about 10 s) and two predict runs
def test_predict_on_nodes_that_share_no_disk_writes_the_thread_records_and_shows_worker_warnings(tmp_path):
    tasks = _task_folder(tmp_path / "tasks")
    registry = _barcode_registry(tmp_path)
    elsewhere = tmp_path / "worker-node"
    elsewhere.mkdir()

    def predict(out: str, *extra: str) -> subprocess.Popen:
        # from the task folder, as a user runs it; three workers on a cluster with two CPUs
        return subprocess.Popen([str(MAESTRO), "predict", "-t", tasks.name, "-o",
                                 str(tmp_path / out / "predictions" / "rules.jsonl"), "-p", "rules", "--workers", "3",
                                 "--registry", str(registry), "--no-cache", *extra],
                                cwd=tasks.parent, env={**os.environ, **ray_env()}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def finish(proc: subprocess.Popen) -> str:
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, output[-3000:]
        return output

    threads = predict("threads")  # while the cluster starts
    with ray_two_nodes(hidden=tasks.parent, workdir=elsewhere) as address:
        finish(threads)
        output = finish(predict("ray", "--executor", f"ray:{address}"))
    records = _records(tmp_path / "ray")["rules"]
    assert len(records) == 5 and all(r["error"] is None and not r["failed"] for r in records), records
    assert _records(tmp_path / "threads") == _records(tmp_path / "ray")
    shown = [line for line in output.splitlines() if "has 2 frames; only the first is read" in line]
    assert shown and all("_RayWorker" in line for line in shown), output[-3000:]  # from a worker, named as such
    threads_counts, ray_counts = _counters(tmp_path / "threads"), _counters(tmp_path / "ray")
    calls = {k: v for k, v in threads_counts.items() if k.startswith("maestro_expert_calls_total")}
    assert calls and calls == {k: v for k, v in ray_counts.items() if k.startswith("maestro_expert_calls_total")}
    by_worker = {k: v for k, v in ray_counts.items() if k.startswith("maestro_batch_items_total{worker=")}
    assert sum(by_worker.values()) == 5 and 1 <= len(by_worker) <= 2  # the two workers the cluster could place


def _counters(run: Path) -> dict[str, float]:
    """The counters of a predict run's metrics file (Prometheus text format), by name and labels."""
    text = (run / "predictions" / "rules.metrics.prom").read_text()
    return {name: float(value) for line in text.splitlines() if line.split("{")[0].endswith("_total")
            for name, value in [line.rsplit(" ", 1)]}


def test_deploy_files_parse_and_run_the_documented_command():
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    instructions = [line.split(maxsplit=1) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert instructions[0][0] == "FROM" and any('".[ray,redis]"' in rest for op, rest in instructions if op == "RUN")
    kept = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for op, rest in instructions:
        if op == "COPY":  # from the repository root, and not left out of the build context
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists() and (f"!{source}" in kept or f"!{source}/**" in kept), source
    runtime_env = yaml.safe_load((DEPLOY / "runtime_env.yaml").read_text())
    assert set(runtime_env) <= {"working_dir", "env_vars", "excludes"}
    assert all(isinstance(v, str) for v in runtime_env["env_vars"].values())

    manifests = {doc["kind"]: doc for path in sorted(DEPLOY.glob("kuberay-*.yaml"))
                 for doc in yaml.safe_load_all(path.read_text())}
    assert {"RayJob", "RayCluster"} <= set(manifests)
    for kind in ("RayJob", "RayCluster"):
        doc = manifests[kind]
        assert doc["apiVersion"] == "ray.io/v1" and doc["metadata"]["name"]
        cluster = doc["spec"]["rayClusterSpec"] if kind == "RayJob" else doc["spec"]
        groups = cluster["workerGroupSpecs"]
        assert cluster.get("enableInTreeAutoscaling") is True  # workers grow as the executor asks for them
        assert all(g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in groups)
        for pod in [cluster["headGroupSpec"]["template"], *(g["template"] for g in groups)]:
            container = pod["spec"]["containers"][0]
            assert container["image"].startswith("maestro-graph")  # the image deploy/Dockerfile builds
            env = {e["name"] for e in container.get("env", [])}
            assert "RAY_AUTH_TOKEN" in env
    entrypoint = manifests["RayJob"]["spec"]["entrypoint"].split()
    assert entrypoint[:2] == ["maestro", "predict"] and "--executor" in entrypoint
    assert entrypoint[entrypoint.index("--executor") + 1] == "ray:auto"
    assert yaml.safe_load(manifests["RayJob"]["spec"]["runtimeEnvYAML"]) == runtime_env  # one runtime env
