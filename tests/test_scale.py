"""Scale-out on real services (tests/services.py starts them): episodes and GRPO rollouts on a Ray cluster give the
records a thread pool gives, workers share the expert cache through Redis, `maestro serve` replicas share threads
through Postgres, and an unreachable service is a clear error at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
import yaml
from servers import EXAMPLES, ROOT, data_url, maestro_serve, slow_messages, slow_registry, stream_slow_episode
from services import postgres_server, ray_cluster, ray_env, redis_server
from typer.testing import CliRunner

from maestro_graph.batch.executors import RayExecutor, RegistrySource
from maestro_graph.core.configs import DEFAULT_MAX_COST, DEFAULT_MAX_TURNS
from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.doors.serve.loopback import free_port
from maestro_graph.operations.reliability.suite import fault_registry
from maestro_graph.operations.reliability.target import Target
from maestro_graph.operations.reliability.traffic import thread_storage
from maestro_graph.policy.base import ActionSpace, EpisodeView
from maestro_graph.training.rl.grpo import NeuralGRPOConfig, NeuralGRPOTrainer

BARCODE_TASKS = ROOT / "tests" / "data" / "real" / "barcode" / "tasks.jsonl"
MAESTRO = Path(sys.executable).parent / "maestro"


def _barcode_registry(folder: Path) -> Path:
    """Two barcode readers on the two barcode skills: fast, CPU-light, deterministic experts."""
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["barcode-reading", "barcode"],
                                    "models": [
        {"name": "zxing", "description": "zxing-cpp barcode reader.", "capabilities": ["barcode"],
         "backend": {"type": "python", "entry": "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"},
         "cost": {"per_call": 0.01}},
        {"name": "opencv-barcode", "description": "OpenCV barcode and QR reader.", "capabilities": ["barcode"],
         "backend": {"type": "python", "entry": "maestro_graph.experts.opencv_barcode:OpenCVBarcodeExpert"},
         "cost": {"per_call": 0.01}}]}))
    return path


@pytest.fixture(scope="module")
def cluster() -> str:
    with ray_cluster(num_cpus=2) as address:
        yield address


@pytest.mark.slow  # about 5 s: `maestro serve` loads its app before it reaches the database
def test_unreachable_services_are_clear_errors_at_start(tmp_path):
    """Ray and Postgres hold the work and the threads; a Redis cache only helps, so an unreachable one is worked
    around (tests/test_cache_redis.py)."""
    closed = free_port()  # nothing listens there
    runner = CliRunner()
    common = ["eval", "-t", str(BARCODE_TASKS), "-p", "rules", "-o", str(tmp_path / "out"), "--registry",
              str(_barcode_registry(tmp_path)), "--cache-dir", str(tmp_path / "cache")]
    cases = [(common + ["--executor", f"ray:127.0.0.1:{closed}"], f"Ray cluster at 127.0.0.1:{closed}"),
             (["serve", "--checkpoint-db", f"postgresql://postgres:secret@127.0.0.1:{closed}/postgres"],
              f"Postgres (checkpoints) at postgresql://postgres@127.0.0.1:{closed}/postgres")]
    for args, message in cases:
        result = runner.invoke(app, args)
        output = " ".join(result.output.split())  # rich wraps long lines
        assert result.exit_code == 2, output
        assert message in output and "unreachable" in output and "Traceback" not in output
        assert "secret" not in output  # the password stays out of the message


def test_ray_without_its_extra_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the `ray` extra were not installed
    result = CliRunner().invoke(app, ["predict", "-t", str(BARCODE_TASKS), "-o", str(tmp_path / "p.jsonl"),
                                      "--registry", str(_barcode_registry(tmp_path)), "--executor", "ray"])
    assert result.exit_code == 2 and "pip install 'maestro-graph[ray]'" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["predict", "-t", str(BARCODE_TASKS), "-o", str(tmp_path / "p.jsonl"),
                                      "--registry", str(_barcode_registry(tmp_path)), "--executor", "dask"])
    assert result.exit_code == 2 and "unknown executor 'dask'" in result.output


def _records(folder: Path) -> dict[str, list[dict]]:
    """Each policy's prediction records by id, latencies left out (the only field that may differ)."""
    def strip(record: dict) -> dict:
        record = {k: v for k, v in record.items() if k != "latency_s"}
        for part in ("steps", "decisions"):
            record[part] = [{k: v for k, v in s.items() if k != "latency_s"} for s in record[part]]
        return record

    return {f.stem: sorted((strip(json.loads(line)) for line in f.read_text().splitlines()), key=lambda r: r["id"])
            for f in sorted((folder / "predictions").glob("*.jsonl"))}


@pytest.mark.slow
def test_eval_on_ray_writes_the_thread_records_and_workers_share_the_redis_cache(cluster, tmp_path):
    registry = _barcode_registry(tmp_path)
    env = {**os.environ, **ray_env()}

    def maestro_eval(out: str, *extra: str) -> dict:
        subprocess.run([str(MAESTRO), "eval", "-t", str(BARCODE_TASKS), "-p", "rules", "-p", "random",
                        "--limit", "6", "--workers", "2", "--registry", str(registry), "-o", str(tmp_path / out),
                        *extra], env=env, check=True, capture_output=True, timeout=300)
        return json.loads((tmp_path / out / "results.json").read_text())["policies"]

    maestro_eval("threads", "--cache-dir", str(tmp_path / "cache-threads"))
    with redis_server(tmp_path) as (url, _):
        ray_args = ["--executor", f"ray:{cluster}", "--cache-url", url]
        first = maestro_eval("ray", *ray_args, "--cache-dir", str(tmp_path / "cache-ray"))
        second = maestro_eval("ray-again", *ray_args, "--cache-dir", str(tmp_path / "cache-ray-again"))
    assert _records(tmp_path / "threads") == _records(tmp_path / "ray")
    assert sum(m["items"] for m in first.values()) == 12 and all(m["cache_misses"] > 0 for m in first.values())
    # a fresh local directory, so every hit came from Redis: the second run calls no expert at all
    assert all(m["cache_misses"] == 0 and m["cache_hits"] > 0 for m in second.values())
    assert {p: [r["answer"] for r in rs] for p, rs in _records(tmp_path / "ray-again").items()} == \
        {p: [r["answer"] for r in rs] for p, rs in _records(tmp_path / "ray").items()}


@pytest.mark.slow
def test_a_ray_worker_that_dies_has_its_episode_run_again_written_once_and_named(cluster, tmp_path):
    marker = tmp_path / "died"
    registry = tmp_path / "dying.yaml"
    registry.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["barcode-reading", "barcode"],
                                        "models": [{"name": "dying", "description": "A reader that dies once.",
                                                    "capabilities": ["barcode"], "cacheable": False,
                                                    "backend": {"type": "python",
                                                                "entry": "fakes:DyingOnceBarcodeExpert",
                                                                "options": {"marker": str(marker)}}}]}))
    out = tmp_path / "pred.jsonl"
    run = subprocess.run([str(MAESTRO), "predict", "-t", str(BARCODE_TASKS), "-o", str(out), "--limit", "4",
                          "--workers", "2", "--registry", str(registry), "--policy", "fixed:dying@@barcode-reading",
                          "--no-cache", "--executor", f"ray:{cluster}"], env={**os.environ, **ray_env()},
                         capture_output=True, text=True, timeout=300)
    # every item ran, on less than was asked for: the lost worker is named and the status says so (LOST_CAPACITY)
    assert run.returncode == 4 and "lost worker" in run.stderr and "1 workers lost" in run.stderr, run.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert marker.exists()  # a worker process did die mid-episode
    assert sorted(r["id"] for r in records) == sorted(t.id for t in load_tasks(BARCODE_TASKS)[0][:4])  # once each
    assert all(r["error"] is None and r["steps"][0]["error"] is None for r in records)  # and finished elsewhere


@pytest.mark.slow
def test_grpo_rollouts_on_two_ray_workers_match_the_local_trainer(cluster, tmp_path, monkeypatch):
    for key, value in ray_env().items():  # before Ray is imported: it reads its authentication settings then
        monkeypatch.setenv(key, value)
    import ray
    source = RegistrySource(_barcode_registry(tmp_path), tmp_path / "cache")
    tasks, _ = load_tasks(BARCODE_TASKS)
    config = NeuralGRPOConfig(steps=2, tasks_per_step=4, num_generations=3, registry_dropout=0.3, seed=7, hidden=32)
    local = NeuralGRPOTrainer(source.load(), tasks, config, tmp_path / "local")
    try:
        executor = RayExecutor(source, workers=2, address=cluster)
        remote = NeuralGRPOTrainer(source.load(), tasks, config, tmp_path / "ray", executor=executor)
        walls = {}
        for name, trainer in (("local", local), ("ray", remote)):
            start = time.perf_counter()
            stats = [trainer.train_step() for _ in range(config.steps)]
            walls[name] = (time.perf_counter() - start, [s["group_rewards"] for s in stats])
    finally:
        ray.shutdown()
    print(f"GRPO {config.steps} steps x {config.tasks_per_step} groups x {config.num_generations}: local "
          f"{walls['local'][0]:.1f} s, 2 Ray workers {walls['ray'][0]:.1f} s")
    assert walls["ray"][1] == walls["local"][1]  # the same rewards, group by group, step by step
    assert any(len(set(g)) > 1 for step in walls["local"][1] for g in step)  # some group carried a signal
    # so the learner on the driver made the same update: the two policies choose alike on every task's opening
    # state. Compared by what they choose, not weight by weight: a bias added to every candidate's score has no
    # gradient (a softmax ignores it), so Adam turns float noise there into moves of up to its learning rate
    registry, untrained = source.load(), NeuralGRPOTrainer(source.load(), tasks, config, tmp_path / "untrained").policy
    moved = 0.0
    for task in tasks:
        view = EpisodeView.of_task(task, (), DEFAULT_MAX_TURNS, DEFAULT_MAX_COST)
        space = ActionSpace.build(registry, view)
        mine, theirs = local.policy.distribution(view, space), remote.policy.distribution(view, space)
        assert mine.actions == theirs.actions
        torch.testing.assert_close(torch.as_tensor(mine.probs), torch.as_tensor(theirs.probs), rtol=1e-3, atol=1e-4,
                                   msg=lambda m, task=task: f"{task.id}: {m}")
        moved = max(moved, float(abs(torch.as_tensor(mine.probs) - torch.as_tensor(
            untrained.distribution(view, space).probs)).max()))
    assert moved > 1e-2, moved  # the update moved the policy far more than the tolerance


@pytest.mark.slow
def test_a_thread_started_on_one_replica_resumes_on_another_through_postgres(tmp_path):
    registry = slow_registry(tmp_path, delay_s=4.0)
    messages = slow_messages()
    with postgres_server() as db:
        args = ["--registry", str(registry), "--checkpoint-db", db.url, "--policy", "rules"]
        with maestro_serve(args, tmp_path / "a.log") as (replica_a, url_a), \
                maestro_serve(args, tmp_path / "b.log") as (_, url_b):
            client_a = openai.OpenAI(base_url=f"{url_a}/v1", api_key="unused", max_retries=0)
            seen = []
            with pytest.raises((openai.APIError, httpx.HTTPError)):
                # SIGKILL while the slow second step runs on replica A
                stream_slow_episode(client_a, "t-replicas", lambda: (replica_a.kill(), replica_a.wait(timeout=10)),
                                    seen)
            assert seen.count("step") == 1

            before = httpx.get(f"{url_b}/v1/threads/t-replicas").json()  # replica B sees A's checkpoints
            assert before["finished"] is False and [s["model"] for s in before["steps"]] == ["crashing-ocr"]
            client_b = openai.OpenAI(base_url=f"{url_b}/v1", api_key="unused", max_retries=0)
            reply = client_b.chat.completions.create(model="maestro", messages=messages,
                                                     extra_body={"thread_id": "t-replicas"})
            trace = reply.model_extra["maestro"]
            assert trace["resumed"] is True and reply.choices[0].message.content == "late"
            assert trace["steps"][0] == before["steps"][0]  # A's finished step is kept, not run again
            assert [s["model"] for s in trace["steps"]] == ["crashing-ocr", "slow-ocr"]  # each step once
            assert httpx.get(f"{url_b}/v1/threads/t-replicas").json()["finished"] is True


def test_a_long_thread_in_postgres_keeps_each_image_once_and_is_pruned(tmp_path):
    """A Postgres checkpoint database kept every image inline in every checkpoint and every checkpoint of a thread
    (no image store, no pruning): `maestro reliability`'s thread-storage check, which the SQLite file passes, run
    against Postgres: the database grows by less than the image over five more questions resending it, the history
    is bounded, and an image past its retention is asked for again."""
    with postgres_server() as db:
        case = thread_storage(Target("", 0, tmp_path, data_url(EXAMPLES / "qrcode.png"),
                                     fault_registry(tmp_path, None)), db.url)
    assert case.ok, f"{case.must} did not hold: {case.detail}"


@pytest.mark.slow
def test_a_lost_postgres_fails_the_request_with_503_and_the_thread_resumes(tmp_path):
    registry = slow_registry(tmp_path, delay_s=3.0)
    messages = slow_messages()
    with postgres_server() as db:
        args = ["--registry", str(registry), "--checkpoint-db", db.url, "--policy", "rules"]
        with maestro_serve(args, tmp_path / "serve.log") as (_, url):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            with pytest.raises(openai.APIError) as raised:
                stream_slow_episode(client, "t-lost", db.stop, [])  # the database goes away while the slow step runs
            assert "checkpoints_unavailable" in str(raised.value.body), raised.value.body  # the 503's code
            db.start()  # back on the same port with the same data: the retry resumes the thread
            reply = client.chat.completions.create(model="maestro", messages=messages,
                                                   extra_body={"thread_id": "t-lost"})
            trace = reply.model_extra["maestro"]
            assert trace["resumed"] is True and reply.choices[0].message.content == "late"
            assert [s["model"] for s in trace["steps"]] == ["crashing-ocr", "slow-ocr"]
