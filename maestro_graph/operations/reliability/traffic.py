"""The trust suite's checks of a server under real traffic: many requests at once, clients that go away,
hosts that trickle bytes, and threads that belong to their key. Each check runs against a real server on loopback
(`Target`) and measures what must not happen directly: the process's RSS, the time a fetch takes, the CPU time a
server spends after its client left, another key's view of a thread.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from ...core.environment import SUITE_OWNER_KEYS
from ...doors.serve import ServeSettings, create_app
from ...doors.serve.checkpoint_db import is_postgres
from ...doors.serve.loopback import running_app
from ...registry import Registry
from .image_checks import BOMB_SIDE, COUNT_QUESTION, bomb_urls
from .registries import fault_registry
from .target import QUESTION, Listener, Target, TrustCase, langserve_mounted, peak_rss_growth_mb

__all__ = ["TRAFFIC_CHECKS", "Trickler", "post_at_once", "concurrent_image_memory", "image_memory_case",
           "trickling_host",
           "trickle_case", "client_goes_away", "disconnect_case", "threads_belong_to_their_key", "ownership_case",
           "slow_cards_registry", "webp_bomb_url", "refused_pair_request", "noise_url", "CONCURRENT_REQUESTS",
           "CONCURRENT_MEMORY_LIMIT_MB", "SHAPES_POLICY", "OWNER_KEYS", "TRICKLE_FETCH_TIMEOUT_S", "TRICKLE_SLACK_S",
           "thread_storage", "database_bytes", "traffic_server_args"]

CONCURRENT_REQUESTS = 16
"""Requests sent at once in the memory check (a burst a single client can send)."""
CONCURRENT_MEMORY_LIMIT_MB = 1024.0
"""What CONCURRENT_REQUESTS requests of an image at the pixel cap may add to the server's RSS, together."""
TRICKLE_BYTES, TRICKLE_EVERY_S = 10, 0.5
"""How the trickling host sends its body: this many bytes, then a pause, until the client gives up."""
TRICKLE_FETCH_TIMEOUT_S = 2.0
"""The `fetch_timeout_s` of the server the trickle check starts; the fetch must end within it plus TRICKLE_SLACK_S."""
TRICKLE_SLACK_S = 1.0


def webp_bomb_url(png_url: str) -> str:
    """The image of a PNG data URL (`trust.bomb_urls`) as a lossy WebP data URL: about 100 KB for 40 megapixels,
    which take some 600 MB to decode."""
    png = Image.open(io.BytesIO(base64.b64decode(png_url.partition(",")[2])))
    buf = io.BytesIO()
    png.convert("RGB").save(buf, format="WEBP", quality=10)
    return f"data:image/webp;base64,{base64.b64encode(buf.getvalue()).decode()}"


def refused_pair_request(image: str) -> dict:
    """A chat request of `image` and a second image the server refuses (a local path, with no image directory)."""
    content = [{"type": "text", "text": COUNT_QUESTION}, {"type": "image_url", "image_url": {"url": image}},
               {"type": "image_url", "image_url": {"url": "/etc/hostname"}}]
    return {"model": "maestro", "messages": [{"role": "user", "content": content}]}


def post_at_once(url: str, bodies: list[dict], headers: dict[str, str], timeout_s: float = 120) -> list[int]:
    """POST every body to the chat route at the same moment; their statuses."""
    start = threading.Barrier(len(bodies))

    def send(body: dict) -> int:
        with httpx.Client(timeout=timeout_s, headers=headers) as client:
            start.wait()
            return client.post(f"{url}/v1/chat/completions", json=body).status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def concurrent_image_memory(t: Target) -> TrustCase:
    """CONCURRENT_REQUESTS requests at once, each an image at the pixel cap (a 100 KB WebP, then a 10 KB PNG) and a
    second image the server refuses: all refused (400), and the server's RSS, sampled throughout, grows by less
    than CONCURRENT_MEMORY_LIMIT_MB (every image's header is checked before any is decoded; what is decoded holds
    the process's decode budget)."""
    return image_memory_case(t.url, t.pid)


def image_memory_case(url: str, pid: int, headers: dict[str, str] | None = None) -> TrustCase:
    """`concurrent_image_memory` against the server at `url` (process `pid`), with these request headers."""
    details, ok = [], True
    png = bomb_urls(1)[0]  # one image for all: a decode's result is remembered only once it has finished
    for kind, image in (("WebP", webp_bomb_url(png)), ("PNG", png)):
        bodies = [refused_pair_request(image)] * CONCURRENT_REQUESTS
        idle, grown, statuses = peak_rss_growth_mb(pid, partial(post_at_once, url, bodies, headers or {}), settle_s=1.0)
        ok = ok and set(statuses) == {400} and grown < CONCURRENT_MEMORY_LIMIT_MB
        details.append(f"{kind}: statuses {sorted(set(statuses))}, RSS peak {grown:+.0f} MB over {idle:.0f} MB")
    return TrustCase(f"{CONCURRENT_REQUESTS} requests at once of a {BOMB_SIDE}x{BOMB_SIDE} image and a refused one",
                     f"all 400, RSS grows under {CONCURRENT_MEMORY_LIMIT_MB:g} MB", ok, "; ".join(details))


class Trickler(Listener):
    """A loopback HTTP server that answers every request with a 200 and an image body it sends TRICKLE_BYTES at a
    time every TRICKLE_EVERY_S seconds (a slow or hostile allow-listed host), until the client hangs up."""

    def __init__(self) -> None:
        self.served_s: list[float] = []
        """How long each connection was held, as the host saw it."""
        super().__init__()

    def _serve(self, conn: socket.socket) -> None:
        threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        start = time.monotonic()
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 1000000\r\n\r\n")
                while time.monotonic() - start < 120:
                    conn.sendall(b"\x89PNG\r\n\x1a\n\0\0"[:TRICKLE_BYTES])
                    time.sleep(TRICKLE_EVERY_S)
            except OSError:  # the client hung up: what the check waits for
                pass
        self.served_s.append(time.monotonic() - start)


def trickling_host(t: Target) -> TrustCase:
    """An allow-listed host that sends 10 bytes every 0.5 s: the fetch ends within `fetch_timeout_s` (+1 s) with a
    400 that says so (a server of the suite's own, whose allow-list names the host)."""
    trickler = Trickler()
    try:
        settings = ServeSettings(fetch_timeout_s=TRICKLE_FETCH_TIMEOUT_S,
                                 allowed_image_hosts=(f"127.0.0.1:{trickler.port}",))
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url:
            return trickle_case(url, trickler)
    finally:
        trickler.close()


def trickle_case(url: str, trickler: Trickler, headers: dict[str, str] | None = None) -> TrustCase:
    """`trickling_host` against the server at `url`, which allow-lists the trickler and fetches within
    TRICKLE_FETCH_TIMEOUT_S."""
    start = time.perf_counter()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=60, headers=headers, json={
        "model": "maestro", "messages": [{"role": "user", "content": [
            {"type": "text", "text": COUNT_QUESTION},
            {"type": "image_url", "image_url": {"url": f"http://127.0.0.1:{trickler.port}/slow.png"}}]}]})
    took = time.perf_counter() - start
    code = reply.json().get("error", {}).get("code") if reply.status_code != 200 else None
    message = reply.json().get("error", {}).get("message", "") if reply.status_code != 200 else ""
    limit = TRICKLE_FETCH_TIMEOUT_S + TRICKLE_SLACK_S
    return TrustCase(f"an allow-listed host trickling {TRICKLE_BYTES} bytes every {TRICKLE_EVERY_S:g} s",
                     f"the fetch ends within fetch_timeout_s + {TRICKLE_SLACK_S:g} s with a 400 naming the limit",
                     reply.status_code == 400 and code == "image_fetch_failed" and "fetch_timeout_s" in message
                     and took < limit, f"{reply.status_code} {code} after {took:.1f} s (fetch_timeout_s "
                     f"{TRICKLE_FETCH_TIMEOUT_S:g}): {message[:120]!r}")


# -- a client that goes away -------------------------------------------------------------------------------------
SHAPES_POLICY = "shapes=fixed:opencv-vision@@counting"
"""The policy the disconnect check offers and names: every step counts shapes with the OpenCV analyser, whose
polygon search on a noisy image runs for many seconds of CPU (long loops that look at their cancellation)."""
TRIANGLES = "How many triangles are in the image?"
NOISE_SIDE = 600
CANCEL_LIMIT_S = 1.0
"""How soon after its client left an episode must be cancelled (no episode in flight)."""
QUIET_AFTER_S, QUIET_FOR_S, QUIET_CPU_S = 2.0, 2.0, 0.3
"""From QUIET_AFTER_S after the client left, for QUIET_FOR_S, the server may spend at most QUIET_CPU_S of CPU."""
LATENCY_SLACK_S = 0.25
"""Added to twice the idle latency of the next ordinary request (timer noise on a busy machine)."""


def noise_url(side: int = NOISE_SIDE) -> str:
    """A black-and-white noise PNG (seeded) as a data URL: thousands of short straight strokes."""
    rng = np.random.default_rng(46)
    image = Image.fromarray((rng.random((side, side)) > 0.5).astype(np.uint8) * 255, "L")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"


def slow_cards_registry(folder: Path) -> Path:
    """The suite's fast experts with a long card timeout (60 s), so a polygon search is not cut by its timeout but
    only by its client going away."""
    folder.mkdir(parents=True, exist_ok=True)
    return fault_registry(folder, None, timeout_s=60.0)


def traffic_server_args(folder: Path, trickler: Trickler, keys_env: str) -> list[str]:
    """The `maestro serve` arguments of a server every case of this module can run against: the keys in
    `keys_env`, threads in a SQLite file of `folder`, the trickler allow-listed within TRICKLE_FETCH_TIMEOUT_S, and
    SHAPES_POLICY offered on cards with a long timeout (`slow_cards_registry`)."""
    return ["--registry", str(slow_cards_registry(folder)), "--workers", "2", "--api-key-env", keys_env,
            "--checkpoint-db", str(folder / "threads.sqlite"), "--allow-image-host", f"127.0.0.1:{trickler.port}",
            "--fetch-timeout-s", str(TRICKLE_FETCH_TIMEOUT_S), "--allow-policy", "neural", "--allow-policy", "rules",
            "--allow-policy", SHAPES_POLICY, "--log-level", "info"]


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _in_flight(url: str, headers: dict[str, str]) -> int:
    return httpx.get(f"{url}/healthz", timeout=30, headers=headers).json()["episodes_in_flight"]


def _ordinary(url: str, image: str, headers: dict[str, str]) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, headers=headers, json={
        "model": "maestro", "messages": [{"role": "user", "content": [
            {"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": image}}]}]})
    return time.perf_counter() - start, reply


def _typical(url: str, image: str, headers: dict[str, str]) -> tuple[float, set[int]]:
    """The median time of three ordinary requests one after another, and their statuses: one request's time is
    at the mercy of whatever else the machine runs, while work the server still does slows all three."""
    runs = [_ordinary(url, image, headers) for _ in range(3)]
    return sorted(took for took, _ in runs)[1], {reply.status_code for _, reply in runs}


def _leave(url: str, door: str, headers: dict[str, str]) -> None:
    """Start a long episode through `door` and go away after a second and a half."""
    langserve = {"input": {"question": TRIANGLES, "images": [noise_url()], "policy": "shapes"}}
    if door in ("openai", "langserve invoke"):
        path, body = ("/v1/chat/completions", _shapes_chat()) if door == "openai" else ("/maestro/invoke", langserve)
        with contextlib.suppress(httpx.TimeoutException):
            httpx.post(f"{url}{path}", timeout=1.5, headers=headers, json=body)
        return
    path, body = (("/v1/chat/completions", {**_shapes_chat(), "stream": True}) if door == "openai stream" else
                  ("/maestro/stream", langserve))
    leave_at = time.perf_counter() + 1.5
    with contextlib.suppress(httpx.TimeoutException), httpx.stream(
            "POST", f"{url}{path}", json=body, headers=headers, timeout=httpx.Timeout(60, read=1.5)) as response:
        for _ in response.iter_bytes():  # LangServe sends nothing before the first step ends: the read times out
            if time.perf_counter() > leave_at:
                break


def _shapes_chat() -> dict:
    return {"model": "maestro", "policy": "shapes", "max_turns": 1, "messages": [{"role": "user", "content": [
        {"type": "text", "text": TRIANGLES}, {"type": "image_url", "image_url": {"url": noise_url()}}]}]}


def disconnect_case(url: str, pid: int, image: str, headers: dict[str, str] | None = None) -> TrustCase:
    """Through each door (OpenAI plain and streamed, LangServe's /invoke and stream where mounted) a client starts
    an episode whose expert work takes many seconds of CPU and goes away: the episode is cancelled within
    CANCEL_LIMIT_S, the server's CPU time stays flat from QUIET_AFTER_S after, and the next ordinary requests take
    at most twice what they take on an idle server (each the median of three). The server must offer SHAPES_POLICY
    and give its cards a long timeout."""
    headers = headers or {}
    _ordinary(url, image, headers)  # experts loaded
    idle = _typical(url, image, headers)[0]
    doors = ["openai", "openai stream"]
    if langserve_mounted(url, headers):
        doors += ["langserve invoke", "langserve stream"]
    details, ok = [f"idle request {idle:.2f} s"], True
    for door in doors:
        _leave(url, door, headers)
        gone = time.perf_counter()
        while _in_flight(url, headers) and time.perf_counter() - gone < 5:
            time.sleep(0.05)
        cancelled = time.perf_counter() - gone
        time.sleep(max(0.0, gone + QUIET_AFTER_S - time.perf_counter()))
        before = _cpu_s(pid)
        time.sleep(QUIET_FOR_S)
        spent = _cpu_s(pid) - before
        took, statuses = _typical(url, image, headers)
        door_ok = (cancelled < CANCEL_LIMIT_S and spent < QUIET_CPU_S and statuses == {200}
                   and took < 2 * idle + LATENCY_SLACK_S)
        ok = ok and door_ok
        details.append(f"{door}: cancelled after {cancelled:.2f} s, {spent:.2f} s CPU in {QUIET_FOR_S:g} s from "
                       f"{QUIET_AFTER_S:g} s on, next requests {sorted(statuses)} in a median {took:.2f} s")
    return TrustCase("a client that goes away during a long episode", f"cancelled within {CANCEL_LIMIT_S:g} s; "
                     f"no work {QUIET_AFTER_S:g} s later; the next requests' median within 2x an idle server's", ok,
                     "; ".join(details))


def client_goes_away(t: Target) -> TrustCase:
    """`disconnect_case` against a server of the suite's own (in this process: its CPU time is the suite's)."""
    settings = ServeSettings(policies=(*ServeSettings().policies, SHAPES_POLICY))
    registry = Registry.load(slow_cards_registry(t.folder / "slow-cards"))
    with running_app(create_app(registry, settings)) as url:
        return disconnect_case(url, os.getpid(), t.image)


# -- threads belong to their key ---------------------------------------------------------------------------------
OWNER_KEYS = ("alice-46-key", "bob-46-key")


def ownership_case(url: str, image: str, keys: tuple[str, str] = OWNER_KEYS) -> TrustCase:
    """Key A runs an episode on a thread; key B reading the thread (`GET /v1/threads/ID`) or running on it gets the
    404 of a thread that does not exist, and A still reads it; the same for the thread of A's LangServe run (where
    mounted); `/docs` and `/openapi.json` are closed (404) on a server that did not enable them. The server must
    hold both keys and a checkpoint database."""
    alice, bob = ({"Authorization": f"Bearer {key}"} for key in keys)
    thread = f"thread-46-{time.monotonic_ns()}"
    body = {"model": "maestro", "thread_id": thread, "messages": [{"role": "user", "content": [
        {"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": image}}]}]}
    made = httpx.post(f"{url}/v1/chat/completions", json=body, headers=alice, timeout=120)
    read_by_bob = httpx.get(f"{url}/v1/threads/{thread}", headers=bob, timeout=30)
    run_by_bob = httpx.post(f"{url}/v1/chat/completions", json=body, headers=bob, timeout=120)
    unknown = httpx.get(f"{url}/v1/threads/thread-46-unknown", headers=bob, timeout=30)
    read_by_alice = httpx.get(f"{url}/v1/threads/{thread}", headers=alice, timeout=30)
    docs = {path: httpx.get(f"{url}{path}", timeout=30).status_code for path in ("/docs", "/openapi.json")}
    langserve = "not mounted"
    if langserve_mounted(url):  # a LangServe run's thread is its key's too
        output = httpx.post(f"{url}/maestro/invoke", headers=alice, timeout=120, json={"input": {
            "question": QUESTION, "images": [image]}}).json().get("output", {})
        made_there = output.get("thread_id")
        views = [httpx.get(f"{url}/v1/threads/{made_there}", headers=h, timeout=30).status_code for h in (alice, bob)]
        langserve = f"LangServe thread read by its key {views[0]}, by the other {views[1]}"
        ok_langserve = made_there is not None and views == [200, 404]
    else:
        ok_langserve = True
    same = read_by_bob.json().get("error", {}).get("message", "").replace(thread, "ID") == \
        unknown.json().get("error", {}).get("message", "").replace("thread-46-unknown", "ID")
    ok = (made.status_code == 200 and read_by_bob.status_code == 404 and run_by_bob.status_code == 404 and same
          and read_by_alice.status_code == 200 and QUESTION in read_by_alice.text and QUESTION not in read_by_bob.text
          and set(docs.values()) == {404} and ok_langserve)
    return TrustCase("another key reads or runs on a thread", "404 as for an unknown thread; the owner reads it; "
                     "/docs and /openapi.json closed", ok,
                     f"made {made.status_code}; other key: read {read_by_bob.status_code}, run "
                     f"{run_by_bob.status_code} ({'same' if same else 'DIFFERENT'} refusal as an unknown thread); "
                     f"owner reads {read_by_alice.status_code}; {langserve}; {docs}")


def threads_belong_to_their_key(t: Target) -> TrustCase:
    """`ownership_case` against a server of the suite's own with two keys and a checkpoint database."""
    with SUITE_OWNER_KEYS.set_while(",".join(OWNER_KEYS)):
        settings = ServeSettings(api_key_env=SUITE_OWNER_KEYS.name, checkpoint_db=t.folder / "owner-threads.sqlite")
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url:
            return ownership_case(url, t.image)


# -- a long thread's storage stays bounded --------------------------------------------------------------------------
STORED_IMAGE_SIDE = 600
"""The side of the thread's image: RGB noise, so its PNG (about 1 MB) does not compress."""
THREAD_QUESTIONS = 6
EPISODES_KEPT, CHECKPOINTS_KEPT = 2, 3
"""The history and checkpoints the storage check's server keeps per thread."""
RETENTION_S = 2.0
"""The image retention of the storage check's server (`image_retention_days`, in seconds). SQLite's clock has
whole seconds, so the check waits a second more before it sweeps."""


def database_bytes(db: Path | str, vacuum: bool = True) -> int:
    """What a checkpoint database holds at rest: a SQLite file's size once its write-ahead log is folded in; a
    Postgres database's tables with their indexes and TOAST once vacuumed (as autovacuum does within a minute: the
    rows a prune deleted are then free space, until then they count; `vacuum=False` counts them)."""
    if is_postgres(db):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as conn:
            if vacuum:
                conn.execute("VACUUM")
            return int(conn.execute(  # type: ignore[index]  # an aggregate query returns one row
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname = 'public'").fetchone()[0])
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Path(db).stat().st_size


def _noise_rgb_url(side: int) -> str:
    rng = np.random.default_rng(4)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "RGB").save(buf, format="PNG")
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"


def thread_storage(t: Target, db: Path | str | None = None) -> TrustCase:
    """THREAD_QUESTIONS questions on one thread, each sending the same 1 MB image (as an OpenAI client resends a
    conversation), to a server of the suite's own with a checkpoint database (`db`: a new SQLite file by default, or
    a Postgres URL): the database grows by less than one copy of the image after the first question (images stored
    once by content digest; the checkpoints pruned), the thread's history keeps EPISODES_KEPT episodes, and once
    the retention has run out and the store is swept, a follow-up that needs the image is a 400 asking for it
    again. (One request with 8 history turns added 168 MB to the file before: every checkpoint held every image.)"""
    db = db or t.folder / f"thread-storage-{time.monotonic_ns()}.sqlite"
    settings = ServeSettings(checkpoint_db=db, episodes_kept=EPISODES_KEPT, checkpoints_kept=CHECKPOINTS_KEPT,
                             image_retention_days=RETENTION_S / 86_400)
    app = create_app(Registry.load(t.registry_file), settings)
    image, thread = _noise_rgb_url(STORED_IMAGE_SIDE), "thread-storage"
    image_bytes = len(image) * 3 // 4
    with running_app(app) as url:
        def ask(i: int, images: list[str]) -> httpx.Response:  # answered at once (no budget): storage only
            content: list[dict[str, Any]] = [{"type": "text", "text": f"How many circles are in image {i}?"}]
            content += [{"type": "image_url", "image_url": {"url": u}} for u in images]
            return httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
                "model": "maestro", "thread_id": thread, "max_cost": 0,
                "messages": [{"role": "user", "content": content}]})

        statuses = [ask(0, [image]).status_code]
        first_unvacuumed, first = database_bytes(db, vacuum=False), database_bytes(db)
        statuses += [ask(i, [image]).status_code for i in range(1, THREAD_QUESTIONS)]
        unvacuumed = database_bytes(db, vacuum=False) - first_unvacuumed
        grown = database_bytes(db) - first
        history = httpx.get(f"{url}/v1/threads/{thread}", timeout=30).json()
        time.sleep(RETENTION_S + 1.2)
        app.state.service.store.sweep_ttl()  # what its sweeper thread does every hour
        expired = ask(THREAD_QUESTIONS, [])
    episodes, checkpoints = len(history.get("episodes", [])), len(history.get("checkpoints", []))
    message = expired.json().get("error", {}).get("message", "") if expired.status_code != 200 else ""
    ok = (set(statuses) == {200} and grown < image_bytes and episodes <= EPISODES_KEPT
          and checkpoints <= CHECKPOINTS_KEPT and expired.status_code == 400 and "send it again" in message)
    return TrustCase(f"{THREAD_QUESTIONS} questions on one thread, each with the same {image_bytes:,}-byte image",
                     "the checkpoint database grows by less than the image; history and checkpoints bounded; an "
                     "expired image asked for again", ok,
                     f"statuses {sorted(set(statuses))}; {first:,} bytes after the first question, {grown:+,} after "
                     f"{THREAD_QUESTIONS - 1} more ({grown / (THREAD_QUESTIONS - 1):+,.0f} per question"
                     + (f"; before vacuum {unvacuumed / (THREAD_QUESTIONS - 1):+,.0f}" if is_postgres(db) else "")
                     + f"); "
                     f"{episodes} episodes and {checkpoints} checkpoints kept; after the retention: "
                     f"{expired.status_code} {message[:100]!r}")


TRAFFIC_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (
    concurrent_image_memory, trickling_host, client_goes_away, threads_belong_to_their_key, thread_storage)
"""The checks of this module, in the trust suite's TRUST_CHECKS."""
