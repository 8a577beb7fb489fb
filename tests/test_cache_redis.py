"""The Redis expert cache on a real `redis-server` (tests/services.py): entries expire after the configured TTL, a
process whose Redis went away caches locally without ever waiting on the lost server, and it goes back to Redis once
the server returns, in the cache itself and in a `maestro serve` replica started with `--cache-url`."""

from __future__ import annotations

import base64
import logging
import selectors
import socket
import time
from pathlib import Path

import httpx
import pytest
import yaml
from servers import ROOT, maestro_serve
from services import redis_server
from typer.testing import CliRunner

from maestro_graph.cache.backends import DEFAULT_TTL_S, RedisBackend
from maestro_graph.cache.store import open_cache
from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.doors.serve.loopback import free_port
from maestro_graph.errors import ConfigError

redis = pytest.importorskip("redis", reason="the `redis` extra is not installed (pip install -e '.[redis]')")

BACK_WITHIN_S = 30.0
"""The promise: a replica writes to Redis again within this after the server is back."""
BARCODE_TASKS = ROOT / "tests" / "data" / "real" / "barcode" / "tasks.jsonl"


def _barcode_registry(folder: Path) -> Path:
    """One fast, deterministic CPU expert on the barcode skills."""
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["barcode-reading", "barcode"],
                                    "models": [{"name": "zxing", "description": "zxing-cpp barcode reader.",
                                                "capabilities": ["barcode"], "cost": {"per_call": 0.01},
                                                "backend": {"type": "python", "entry":
                                                            "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"}}]}))
    return path


def _entries(url: str) -> list[bytes]:
    return list(redis.Redis.from_url(url).scan_iter(match=RedisBackend.PREFIX + "*"))


def _wait_for(condition, within_s: float, step=lambda: None) -> float:
    """Seconds until `condition()` held, calling `step()` between looks; fails after `within_s`."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within_s, f"not within {within_s:.0f} s"
        step()
        time.sleep(0.1)
    return time.monotonic() - start


def test_entries_expire_after_the_configured_ttl(tmp_path):
    with redis_server(tmp_path) as (url, _):
        client = redis.Redis.from_url(url)
        open_cache(tmp_path / "local", url).put("week", 1)  # the default
        open_cache(tmp_path / "local", url, ttl_s=60).put("minute", 1)
        open_cache(tmp_path / "local", url, ttl_s=0).put("forever", 1)
        ttl = {key: client.ttl(RedisBackend.PREFIX + key) for key in ("week", "minute", "forever")}
        assert DEFAULT_TTL_S - 60 < ttl["week"] <= DEFAULT_TTL_S and 0 < ttl["minute"] <= 60, ttl
        assert ttl["forever"] == -1  # no expiry: left to the server's maxmemory-policy
        with pytest.raises(ConfigError, match="field 'cache_ttl_s': -1 is negative"):
            open_cache(tmp_path / "local", url, ttl_s=-1)


def test_a_full_redis_without_eviction_is_warned_about_once_and_stays_in_use(tmp_path, caplog):
    with redis_server(tmp_path) as (url, _):
        cache = open_cache(tmp_path / "local", url)
        cache.put("before", 1)
        redis.Redis.from_url(url).config_set("maxmemory-policy", "noeviction")
        redis.Redis.from_url(url).config_set("maxmemory", 1)  # full: every write is refused (OOM)
        with caplog.at_level(logging.WARNING, logger="maestro.cache"):
            for key in ("full", "fuller"):
                cache.put(key, 2)  # refused: the call simply runs uncached next time
                assert cache.get(key) == (False, None)
            assert cache.get("before") == (True, 1)  # still read from the server: it is not gone
        assert _entries(url) == [b"maestro:cache:before"] and not (tmp_path / "local").exists()
    assert [r.getMessage().split(";")[0] for r in caplog.records] == \
        [f"Redis expert cache at {url} refused a command (OutOfMemoryError: command not allowed when used memory > "
         "'maxmemory'.)"]


def test_a_lost_redis_is_replaced_locally_without_waiting_on_it_and_used_again_once_back(tmp_path, caplog):
    with redis_server(tmp_path) as (url, proc):
        cache = open_cache(tmp_path / "local", url)
        cache.put("k1", {"answer": 1})
        assert cache.get("k1") == (True, {"answer": 1}) and not (tmp_path / "local").exists()  # on the server
        result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(tmp_path / "local"), "--cache-url", url])
        assert result.exit_code == 0 and f"removed 1 entries from {url}" in result.output
        cache.put("k1", {"answer": 1})
        proc.terminate()
        proc.wait(timeout=10)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with caplog.at_level(logging.WARNING, logger="maestro.cache"):
        assert cache.get("k1") == (False, None)  # the server's entries are gone with it: recomputed
        cache.put("k2", (1, 2))
        assert cache.get("k2") == (True, (1, 2))  # now kept in the local directory
        assert (cache.stats.hits, cache.stats.misses) == (2, 1)
        # Something on the port that accepts and never answers: a probe of it hangs for the client's socket timeout,
        # and the calls made meanwhile must not.
        with socket.create_server(("127.0.0.1", port)) as hole, selectors.DefaultSelector() as waiting:
            waiting.register(hole, selectors.EVENT_READ)
            slowest = 0.0

            def timed_call() -> None:
                nonlocal slowest
                start = time.perf_counter()
                assert cache.get("k2") == (True, (1, 2))
                slowest = max(slowest, time.perf_counter() - start)

            _wait_for(lambda: bool(waiting.select(timeout=0)), 10.0, timed_call)  # the background probe arrived
            probe, _ = hole.accept()
            with probe:
                for _ in range(5):
                    timed_call()
                    time.sleep(0.05)
        assert slowest < 0.5, f"a call waited {slowest:.2f} s on the lost server"
        with redis_server(tmp_path, port):  # back on the same port, empty
            _wait_for(lambda: bool(_entries(url)), 15.0, lambda: cache.put("k3", 3))
            assert cache.get("k3") == (True, 3)
    messages = [r.getMessage() for r in caplog.records if r.name == "maestro.cache"]
    assert sum("is unreachable" in m for m in messages) == 1 and sum("is back" in m for m in messages) == 1, messages


def test_a_redis_unreachable_at_start_is_worked_around_as_one_lost_later(tmp_path, caplog):
    """The cache only helps: a closed port at start is one warning naming the URL, the process caches locally, and
    a server that comes up on that port is used from then on, as when a server goes away mid-run and comes back."""
    port = free_port()  # nothing listens there
    url = f"redis://127.0.0.1:{port}/0"
    with caplog.at_level(logging.WARNING, logger="maestro.cache"):
        cache = open_cache(tmp_path / "local", url)
        cache.put("k1", {"answer": 1})
        assert cache.get("k1") == (True, {"answer": 1}) and (tmp_path / "local").is_dir()  # kept locally
        with redis_server(tmp_path, port):
            _wait_for(lambda: bool(_entries(url)), 15.0, lambda: cache.put("k2", 2))
            assert cache.get("k2") == (True, 2)
    messages = [r.getMessage() for r in caplog.records if r.name == "maestro.cache"]
    assert sum(f"{url} is unreachable" in m for m in messages) == 1 and sum("is back" in m for m in messages) == 1


def test_a_command_with_an_unreachable_redis_runs_on_its_local_cache(tmp_path):
    """`maestro eval --cache-url` on a closed port answers every item (exit 0) and fills its local cache; clearing
    the cache, which is an operation on the server itself, still names the unreachable server (exit 2)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    local = tmp_path / "cache"
    result = CliRunner().invoke(app, ["eval", "-t", str(BARCODE_TASKS), "-p", "rules", "-o", str(tmp_path / "out"),
                                      "--registry", str(_barcode_registry(tmp_path)), "--cache-dir", str(local),
                                      "--cache-url", url])
    assert result.exit_code == 0, result.output
    assert any(local.rglob("*.json")), "the calls were not cached locally"
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(local), "--cache-url", url])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and f"Redis (expert cache) at {url}" in output and "Traceback" not in output


@pytest.mark.slow  # about 15 s: a `maestro serve` replica and two Redis servers
def test_a_serve_replica_writes_to_redis_again_after_redis_comes_back(tmp_path):
    task = load_tasks(BARCODE_TASKS)[0][1]
    image = (BARCODE_TASKS.parent / task.images[0]).read_bytes()
    body = {"model": "maestro", "messages": [{"role": "user", "content": [
        {"type": "text", "text": task.question},
        {"type": "image_url", "image_url": {"url": f"data:image/webp;base64,{base64.b64encode(image).decode()}"}}]}]}
    local = tmp_path / "local"
    log = tmp_path / "serve.log"
    with redis_server(tmp_path) as (url, redis_proc):
        args = ["--registry", str(_barcode_registry(tmp_path)), "--policy", "rules", "--cache-dir", str(local),
                "--cache-url", url, "--cache-ttl-s", "600"]
        with maestro_serve(args, log) as (_, base), httpx.Client(base_url=base, timeout=60) as client:
            def ask() -> None:
                reply = client.post("/v1/chat/completions", json=body)
                assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == task.answer

            ask()
            entries = _entries(url)
            ttl = [redis.Redis.from_url(url).ttl(key) for key in entries]
            assert entries and not local.exists() and all(0 < t <= 600 for t in ttl), ttl  # --cache-ttl-s applied
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            ask()  # answered while Redis is away, from the local cache
            assert list(local.glob("*/*.json"))
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            with redis_server(tmp_path, port):  # back on the same port, empty
                back_s = _wait_for(lambda: bool(_entries(url)), BACK_WITHIN_S, ask)
    text = log.read_text()
    assert text.count("is unreachable") == 1 and text.count("is back") == 1, text[-3000:]
    print(f"replica wrote to Redis again {back_s:.1f} s after it came back")
