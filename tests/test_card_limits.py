"""Card limits that hold across a cluster, and cards with several endpoints.

The endpoints are VisionEndpointDouble (tests/vision_double.py): a real OpenAI-compatible HTTP server on loopback,
a test double of a model server such as `vllm serve`, which counts the requests it answers at once (`peak`). The
cluster is a real Ray cluster (tests/services.py); the episodes run through `maestro predict --executor ray:...`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from services import ray_cluster, ray_env
from vision_double import VisionEndpointDouble

from maestro_graph.errors import ConfigError, ExpertError, ExpertFailure, ExpertTimeout
from maestro_graph.registry.config import load_config
from maestro_graph.registry.handles import ExpertHandle, Ledger

ROOT = Path(__file__).resolve().parents[1]
BARCODE_TASKS = ROOT / "tests" / "data" / "real" / "barcode" / "tasks.jsonl"
MAESTRO = Path(sys.executable).parent / "maestro"
HELLO = [{"role": "user", "content": "Say hello."}]


def _card(**fields) -> dict:
    """A vision-chat card on the double's model, without cache or retries, so each call reaches an endpoint once."""
    return {"name": "vlm", "description": "A vision-language chat model served by a fleet of replicas.",
            "capabilities": ["vision-chat"], "cacheable": False, "retries": {"attempts": 1}, **fields}


def _registry_file(folder: Path, card: dict) -> Path:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["visual-qa"], "models": [card]}))
    return path


def _handle(folder: Path, **fields) -> ExpertHandle:
    return ExpertHandle(load_config(_registry_file(folder, _card(**fields))).models[0])


def _chat(handle: ExpertHandle) -> str:
    return handle.call("chat", (HELLO,), {}, Ledger()).text


@pytest.mark.parametrize(("backend", "says"), [
    ({"base_url": "http://127.0.0.1:1/v1", "base_urls": ["http://127.0.0.1:2/v1"]},
     "both `base_url` and `base_urls` are set"),
    ({}, "needs `base_url` (one endpoint) or `base_urls` (several)"),
    ({"base_urls": ["http://127.0.0.1:1/v1", "127.0.0.1:2/v1"]}, "[1] '127.0.0.1:2/v1' is not an http:// or https://"),
    ({"base_urls": ["http://127.0.0.1:1/v1", "http://127.0.0.1:1/v1"]}, "each endpoint once, repeated"),
], ids=["both", "neither", "not-http", "repeated"])
def test_a_card_names_its_endpoints_one_way_or_is_refused_by_name(tmp_path, backend, says):
    path = _registry_file(tmp_path, _card(backend={"type": "openai", "model": "vlm-double", **backend}))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(path) in str(refused.value) and "models.0.backend.openai" in str(refused.value)
    assert says in str(refused.value)


def test_calls_are_balanced_and_a_down_endpoint_is_skipped_while_its_breaker_is_open(tmp_path):
    with VisionEndpointDouble(default="hello") as a, VisionEndpointDouble(default="hello") as b:
        handle = _handle(tmp_path, backend={"type": "openai", "base_urls": [a.url, b.url], "model": "vlm-double"},
                         breaker={"failures": 1, "open_s": 60})
        assert [_chat(handle) for _ in range(4)] == ["hello"] * 4
        assert (a.posts, b.posts) == (2, 2)  # one at a time, so in turn

        a.behaviour = 503  # replica A goes down: the call that finds it fails, naming it, and opens its breaker only
        with pytest.raises(ExpertError, match=f"POST {a.url}/chat/completions returned HTTP 503"):
            _chat(handle)
        assert handle.live_unavailable_reason() is None  # the card stays available on B
        assert [_chat(handle) for _ in range(3)] == ["hello"] * 3
        assert (a.posts, b.posts) == (3, 5)  # A was skipped while its breaker is open

        b.behaviour = 503
        with pytest.raises(ExpertError, match=f"POST {b.url}/chat/completions returned HTTP 503"):
            _chat(handle)
        reason = handle.live_unavailable_reason()
        assert reason.startswith("every endpoint's circuit breaker is open") and a.url in reason and b.url in reason
        with pytest.raises(ExpertError) as refused:
            _chat(handle)
        assert refused.value.failure == ExpertFailure.BREAKER_OPEN and (a.posts, b.posts) == (3, 6)
        assert handle.breaker.trips == 2


def test_when_every_endpoint_is_full_a_call_waits_for_a_slot_within_the_card_timeout(tmp_path):
    with VisionEndpointDouble(default="hello", delay_s=0.6) as a, \
            VisionEndpointDouble(default="hello", delay_s=0.6) as b:
        backend = {"type": "openai", "base_urls": [a.url, b.url], "model": "vlm-double"}
        handle = _handle(tmp_path, backend=backend, concurrency=1, timeout_s=5)
        with ThreadPoolExecutor(3) as pool:
            start = time.perf_counter()
            replies = list(pool.map(lambda _: _chat(handle), range(3)))
            wall = time.perf_counter() - start
        assert replies == ["hello"] * 3 and (a.peak, b.peak) == (1, 1) and a.posts + b.posts == 3
        assert wall >= 1.2  # the third call waited for a replica to finish instead of piling onto one

        short = _handle(tmp_path, backend=backend, concurrency=1, timeout_s=0.3)
        with ThreadPoolExecutor(3) as pool:
            outcomes = list(pool.map(lambda _: _outcome(short), range(3)))
        timed_out = "model 'vlm'.chat timed out after 0.3s"
        no_slot = "model 'vlm': no free slot on any endpoint within 0.3s"
        assert sorted(outcomes) == sorted([timed_out, timed_out, no_slot])
        answered = time.monotonic() + 5  # the two calls given up on are still being answered
        while a.posts + b.posts < 5 and time.monotonic() < answered:
            time.sleep(0.05)
        assert a.posts + b.posts == 5  # the call that found no slot reached no endpoint


def _outcome(handle: ExpertHandle) -> str:
    try:
        return _chat(handle)
    except ExpertTimeout as exc:
        return str(exc)


@pytest.mark.slow  # a Ray cluster of 4 workers: 45-60 s on 2 shared cores, mostly the workers starting
def test_a_card_limit_holds_across_four_ray_workers(tmp_path):
    out = tmp_path / "pred.jsonl"
    with VisionEndpointDouble(default="123456", delay_s=0.5) as endpoint, ray_cluster(num_cpus=4) as address:
        registry = _registry_file(tmp_path, _card(backend={"type": "openai", "base_url": endpoint.url,
                                                           "model": "vlm-double"}, concurrency=2, timeout_s=60))
        run = subprocess.run([str(MAESTRO), "predict", "-t", str(BARCODE_TASKS), "--limit", "8", "-o", str(out),
                              "--workers", "4", "--registry", str(registry), "--policy", "fixed:vlm@@visual-qa",
                              "--no-cache", "--executor", f"ray:{address}"], env={**os.environ, **ray_env()},
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 8 and all(r["error"] is None and r["steps"][0]["error"] is None for r in records)
    assert endpoint.posts == 8
    assert endpoint.peak == 2  # four workers, each of which alone would have let 2 calls in, sent 2 at most
