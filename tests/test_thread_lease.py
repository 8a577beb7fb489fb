"""Thread leases in the Postgres checkpoint database: a thread runs on one `maestro serve` replica
at a time, the other answers 409 with Retry-After, and a dead holder's thread fails over with no step run twice."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from servers import maestro_serve, slow_messages, slow_registry, stream_slow_episode
from services import postgres_server

from maestro_graph.doors.serve.thread_lease import ThreadLeases

LEASE_S = 3


@pytest.fixture(scope="module")
def db():
    with postgres_server() as server:
        yield server


def _calls(log: Path) -> list[str]:
    """The pids of the processes that called the slow expert, in call order."""
    return log.read_text().split() if log.exists() else []


def _wait_for(condition, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(0.05)


@pytest.mark.slow  # about 18 s of CPU, most of it the two `maestro serve` replicas' start; two 2 s expert steps
def test_two_replicas_run_a_thread_one_at_a_time_and_a_killed_holders_thread_fails_over(db, tmp_path):
    calls = tmp_path / "slow-calls.log"
    registry = slow_registry(tmp_path, delay_s=2.0, calls=calls)
    args = ["--registry", str(registry), "--checkpoint-db", db.url, "--policy", "rules",
            "--thread-lease-s", str(LEASE_S)]
    with contextlib.ExitStack() as replicas:
        with ThreadPoolExecutor(2) as starting:  # both start at once: most of this test's time is their start
            (replica_a, url_a), (replica_b, url_b) = starting.map(
                lambda log: replicas.enter_context(maestro_serve(args, tmp_path / log)), ["a.log", "b.log"])
        # the same new thread sent to both replicas at the same moment: one runs it, the other refuses
        body = {"model": "maestro", "messages": slow_messages(), "thread_id": "t-race"}
        start = threading.Barrier(2)

        def post(url: str) -> httpx.Response:
            start.wait()
            return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)

        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(post, [url_a, url_b]))
        assert sorted(r.status_code for r in replies) == [200, 409], [r.text for r in replies]
        busy = next(r for r in replies if r.status_code == 409)
        assert busy.json()["error"]["code"] == "thread_busy" and "another replica" in busy.json()["error"]["message"]
        assert busy.headers["Retry-After"] == str(LEASE_S)
        assert len(_calls(calls)) == 1  # the slow step ran on one replica only
        race = httpx.get(f"{url_b}/v1/threads/t-race").json()
        assert race["finished"] is True and [s["model"] for s in race["steps"]] == ["crashing-ocr", "slow-ocr"]

        # the holder is SIGKILLed inside its slow step; the other replica refuses the thread while the holder
        # lives, then completes it from the holder's last committed step
        client_a = openai.OpenAI(base_url=f"{url_a}/v1", api_key="unused", max_retries=0)
        failover = {**body, "thread_id": "t-failover"}
        refused: list[httpx.Response] = []

        def kill_inside_the_slow_step() -> None:
            _wait_for(lambda: len(_calls(calls)) == 2, "replica A's slow expert call")
            refused.append(httpx.post(f"{url_b}/v1/chat/completions", json=failover, timeout=60))
            replica_a.kill()
            replica_a.wait(timeout=10)

        with pytest.raises((openai.APIError, httpx.HTTPError)):
            stream_slow_episode(client_a, "t-failover", kill_inside_the_slow_step, [])
        assert refused[0].status_code == 409 and refused[0].json()["error"]["code"] == "thread_busy"
        before = httpx.get(f"{url_b}/v1/threads/t-failover").json()
        assert before["finished"] is False and [s["model"] for s in before["steps"]] == ["crashing-ocr"]

        deadline = time.monotonic() + LEASE_S + 5  # a killed holder's lease goes with its connection, at once
        while (reply := httpx.post(f"{url_b}/v1/chat/completions", json=failover, timeout=60)).status_code == 409:
            assert time.monotonic() < deadline, "replica A's lease did not expire after its SIGKILL"
            time.sleep(0.2)
        assert reply.status_code == 200, reply.text
        trace = reply.json()["maestro"]
        assert trace["resumed"] is True and reply.json()["choices"][0]["message"]["content"] == "late"
        assert trace["steps"][0] == before["steps"][0]  # A's committed step is kept, not run again
        assert [s["model"] for s in trace["steps"]] == ["crashing-ocr", "slow-ocr"]
        # the slow expert: once for t-race, once in A (killed before its step committed), once in B
        assert _calls(calls)[1:] == [str(replica_a.pid), str(replica_b.pid)]


@pytest.mark.slow  # about 2 s on the module's Postgres
def test_a_replica_whose_lease_connection_is_cut_stops_its_episode_and_frees_the_thread(db):
    import psycopg

    holder = ThreadLeases(db.url, lease_s=LEASE_S, connect_timeout_s=5)
    other = ThreadLeases(db.url, lease_s=LEASE_S, connect_timeout_s=5)
    try:
        cancel = threading.Event()
        lease = holder.try_acquire("t-cut", cancel)
        assert lease is not None and other.try_acquire("t-cut", threading.Event()) is None
        assert holder.try_acquire("t-cut", threading.Event()) is None  # held here too: never taken twice
        with psycopg.connect(db.url, autocommit=True) as admin:  # the holder's session goes, as in a network cut
            cut = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks "
                                "WHERE locktype = 'advisory' AND granted").fetchall()
        assert cut == [(True,)]
        assert cancel.wait(timeout=LEASE_S), "the holder's episode was not cancelled after its lease was lost"
        assert lease.lost is True
        assert other.try_acquire("t-cut", threading.Event()) is not None  # the thread is free for another replica
        holder.release("t-cut")  # lost already: nothing to give back, and no error
        assert holder.try_acquire("t-next", threading.Event()) is not None  # the holder reconnects for new work
    finally:
        holder.close()
        other.close()


@pytest.mark.slow  # about 3 s on the module's Postgres
def test_a_replica_waiting_to_set_up_the_checkpoint_tables_never_stalls_the_one_setting_them_up(db):
    """Two replicas starting together on a new database: while one runs LangGraph's migrations (their indexes are
    built CONCURRENTLY, which waits for every open snapshot), the other waits for the set-up lock. CI once hung here
    for 120 s: the waiter's blocking lock statement held a snapshot that the migrations waited for."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from maestro_graph.doors.serve.checkpoint_db import _SETUP_LOCK, open_checkpointer

    with psycopg.connect(db.url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE setup_race")
    url = db.url.rsplit("/", 1)[0] + "/setup_race"
    with ThreadPoolExecutor(1) as pool:
        with psycopg.connect(url, autocommit=True) as lock_holder:  # replica A: holds the lock on one connection ...
            lock_holder.execute("SELECT pg_advisory_lock(%s)", (_SETUP_LOCK,))
            waiter = pool.submit(open_checkpointer, url)  # replica B: waits for the lock
            time.sleep(1.0)
            assert not waiter.done()
            # ... and migrates on another, as PostgresSaver.setup does with its pool; a stall ends in the timeout
            with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                                 options="-c statement_timeout=15000") as migrating:
                PostgresSaver(migrating).setup()
        saver = waiter.result(timeout=30)  # the lock went with A's connection
    try:
        assert list(saver.list({"configurable": {"thread_id": "none"}})) == []  # B's checkpointer works
    finally:
        saver.conn.close()
