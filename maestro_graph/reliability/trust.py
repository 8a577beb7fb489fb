"""The trust-boundary suite of `maestro reliability`: each attack a client could make on a served Maestro, run
for real against a server on loopback, with what must not happen measured directly (a marker file a pickle would
create, file contents in a reply, connections counted by a listener of the suite's own, the process's RSS, the
time a good request waits).

Who is trusted: the operator (registry, checkpoints, server settings) and skill authors. Who is not: HTTP clients,
task files, images and expert outputs. The checks take a `Target` (a served base URL and the server's process id),
so the tests run the same checks against a `maestro serve` subprocess.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import pickle
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import httpx
import numpy as np
import yaml
import zxingcpp
from PIL import Image, ImageDraw

from ..backends.packages import missing_package
from ..cache.store import ExpertCache
from ..digests import cache_key
from ..episode.graph import build_graph
from ..errors import ConfigError, ExpertTimeout, missing_extra
from ..images.load import image_to_data_url, load_image
from ..images.sources import ImageSources
from ..registry import Registry, load_config
from ..registry.handles import Ledger
from ..serve import ServeSettings, create_app, startup_problem
from ..serve.loopback import running_app

__all__ = ["LANGSERVE_MISSING", "Target", "TrustCase", "TRUST_CHECKS", "run_trust_suite", "Listener", "PlantedPickle",
           "bomb_request", "bomb_urls", "peak_rss_growth_mb", "secret_qr"]

QUESTION = "What text does the QR code encode?"
MEMORY_NAMES = 600
T = TypeVar("T")
MEMORY_LIMIT_MB = 50.0


@dataclass
class Target:
    """A served Maestro under attack: its base URL, its process (for RSS), a scratch folder, a QR data URL,
    and the registry file it serves (the suite starts variants of it)."""

    url: str
    pid: int
    folder: Path
    image: str
    registry_file: Path


@dataclass
class TrustCase:
    attack: str
    must: str
    ok: bool
    detail: str
    skipped: str | None = None
    """Why the check could not run against this server, and how to make it run (None: it ran). A skipped check
    proves nothing either way: it neither holds nor fails the suite."""


LANGSERVE_MISSING = ("the server mounts no LangServe routes: the `langserve` extra is not installed "
                     "(pip install 'maestro-graph[langserve]')")


class Listener:
    """A loopback TCP listener that counts connections and never answers (an internal service, or a hang)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        """What happens to an accepted connection: held open, never answered (a subclass answers it its way)."""
        self._held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


class PlantedPickle:
    """Unpickling this creates the marker file: what an attacker's pickle would do with a shell command (the
    suite and the tests plant it as a checkpoint, a cache entry or a policy file)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _chat(url: str, *, policy: str | None = None, image: str | None = None, timeout: float = 60) -> httpx.Response:
    content: list[dict] = [{"type": "text", "text": QUESTION}]
    if image:
        content.append({"type": "image_url", "image_url": {"url": image}})
    body: dict = {"model": "maestro", "messages": [{"role": "user", "content": content}]}
    if policy is not None:
        body["policy"] = policy
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def _langserve(url: str, policy: str, image: str) -> httpx.Response:
    return httpx.post(f"{url}/maestro/invoke", timeout=60,
                      json={"input": {"question": QUESTION, "images": [image], "policy": policy}})


def _answer(reply: httpx.Response) -> str | None:
    return reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else None


# -- the checks ------------------------------------------------------------------------------------------------
def pickled_checkpoint(t: Target) -> TrustCase:
    marker = t.folder / "pickle-ran"
    replies = []
    for name in ("planted.pt", "planted.safetensors"):
        path = t.folder / name
        path.write_bytes(pickle.dumps(PlantedPickle(marker)))
        replies.append(_chat(t.url, policy=f"neural:{path}", image=t.image))
        try:  # the operator's own path (`maestro ask --policy neural:FILE`): the loader reads no pickle
            from ..policy.neural import NeuralPolicy

            NeuralPolicy.load(path)
            loaded = True
        except ConfigError:
            loaded = False
    refused = all(r.status_code == 400 and "invalid_policy" in r.text for r in replies) and not loaded
    return TrustCase("pickle as policy checkpoint (HTTP, loader)", "never unpickled",
                     refused and not marker.exists(),
                     f"statuses {[r.status_code for r in replies]}, marker {'CREATED' if marker.exists() else 'absent'}")


def _probed_names(t: Target) -> list[str]:
    """Policy names that point at files: system files, a missing one, a folder, and a router file of secrets."""
    secret = t.folder / "router.yaml"
    secret.write_text("backend: openai\nmodel: SECRET-MODEL-NAME\nbase_url: http://10.9.8.7/v1\n")
    return ["neural:/etc/shadow", "neural:/root/.ssh/id_rsa", "neural:/no/such/file.pt", f"neural:{t.folder}",
            f"lm:{secret}", "lm:/no/such/router.yaml", "lm:/etc/passwd"]


def _leaks(reply: httpx.Response) -> bool:
    return any(s in reply.text for s in ("SECRET-MODEL", "10.9.8.7", "root:"))


def file_probing(t: Target) -> TrustCase:
    messages, leaked = set(), []
    for name in _probed_names(t):
        reply = _chat(t.url, policy=name, image=t.image)
        if _leaks(reply):
            leaked.append(name)
        message = reply.json()["error"]["message"]
        messages.add(re.sub(r"policy .* is not offered", "policy NAME is not offered", message))
    return TrustCase("file probing and disclosure through policy names", "one answer for every path, no content",
                     len(messages) == 1 and not leaked, f"{len(messages)} distinct refusals, leaked {leaked or 'none'}")


def internal_requests(t: Target) -> TrustCase:
    listener = Listener()
    try:
        base = f"http://127.0.0.1:{listener.port}"
        statuses = [_chat(t.url, policy=f"lm:openai:{base}/v1|x{c}", image=t.image).status_code
                    for c in ("", "#choice", "#regex")]
        statuses.append(_chat(t.url, image=f"{base}/internal.png").status_code)
        time.sleep(0.3)
        return TrustCase("SSRF through an LM policy URL or an image URL", "no connection to the internal listener",
                         listener.connections == 0 and set(statuses) == {400},
                         f"statuses {statuses}, connections {listener.connections}")
    finally:
        listener.close()


def langserve_door(t: Target) -> TrustCase:
    """The policy attacks above through LangServe's /invoke: a planted pickle as a checkpoint, file probing, an
    internal URL as a router endpoint. Skipped, with the reason, on a server without LangServe routes (a plain
    `pip install maestro-graph`), whose 404s would prove nothing."""
    attack, must = "pickle, file probing and SSRF through LangServe", "refused, no content, no connection"
    if not httpx.get(f"{t.url}/healthz", timeout=30).json().get("langserve"):
        return TrustCase(attack, must, False, LANGSERVE_MISSING, skipped=LANGSERVE_MISSING)
    marker = t.folder / "langserve-pickle-ran"
    planted = t.folder / "langserve-planted.pt"
    planted.write_bytes(pickle.dumps(PlantedPickle(marker)))
    listener = Listener()
    try:
        names = [f"neural:{planted}", *_probed_names(t), f"lm:openai:http://127.0.0.1:{listener.port}/v1|x"]
        replies = {name: _langserve(t.url, name, t.image) for name in names}
        time.sleep(0.3)
    finally:
        listener.close()
    statuses = sorted({r.status_code for r in replies.values()})
    refused = all(r.status_code == 400 and "invalid_policy" in r.text for r in replies.values())
    leaked = [name for name, reply in replies.items() if _leaks(reply)]
    return TrustCase(attack, must, refused and not leaked and not marker.exists() and listener.connections == 0,
                     f"statuses {statuses}, leaked {leaked or 'none'}, marker "
                     f"{'CREATED' if marker.exists() else 'absent'}, connections {listener.connections}")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def policy_memory(t: Target) -> TrustCase:
    _chat(t.url, image=t.image)  # models loaded: the baseline
    with httpx.Client(timeout=30) as client:
        def send(i: int) -> int:
            return client.post(f"{t.url}/v1/chat/completions", json={
                "model": "maestro", "policy": f"fixed:zxing@@barcode-reading-{i}",
                "messages": [{"role": "user", "content": QUESTION}]}).status_code

        statuses = {send(i) for i in range(50)}
        before = _rss_mb(t.pid)
        statuses |= {send(i) for i in range(50, 50 + MEMORY_NAMES)}
    grown = _rss_mb(t.pid) - before
    return TrustCase(f"{MEMORY_NAMES} distinct policy strings", f"RSS grows under {MEMORY_LIMIT_MB:g} MB",
                     grown < MEMORY_LIMIT_MB and statuses == {400}, f"RSS {grown:+.1f} MB, statuses {sorted(statuses)}")


def hanging_endpoint(t: Target) -> TrustCase:
    """Even a router endpoint the operator offered that never answers: the 504s cancel the episodes, the workers
    are free at once and a good request is answered."""
    listener = Listener()
    try:
        settings = ServeSettings(workers=2, request_timeout_s=2.0, policy="rules",
                                 policies=("rules", f"hang=lm:openai:http://127.0.0.1:{listener.port}/v1|x"))
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url:
            _chat(url, image=t.image)
            start = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                stuck = [r.status_code for r in pool.map(lambda _: _chat(url, policy="hang", image=t.image), range(2))]
            while httpx.get(f"{url}/healthz").json()["episodes_in_flight"] and time.perf_counter() - start < 10:
                time.sleep(0.05)
            freed = time.perf_counter() - start
            good = _answer(_chat(url, image=t.image, timeout=30))
            waited = time.perf_counter() - start
    finally:
        listener.close()
    return TrustCase("two requests on a router endpoint that never answers", "the next good request is answered",
                     stuck == [504, 504] and freed < 4 and good == "Wikipedia",
                     f"statuses {stuck}, workers free after {freed:.1f} s, good request answered {good!r} "
                     f"after {waited:.1f} s")


def stuck_expert(t: Target) -> TrustCase:
    """Twelve calls to an expert stuck on every call (more than the old shared pool's threads; injected hangs on
    the real zxing reader) leave a healthy reader as fast as before: each card runs on its own threads."""
    zxing = next(c for c in load_config().models if c.name == "zxing").model_dump(mode="json", exclude_defaults=True)
    limits = {"cacheable": False, "retries": {"attempts": 1}, "breaker": {"failures": 1000}}
    models = [{**zxing, **limits, "name": "stuck-zxing", "timeout_s": 0.3, "concurrency": 12,
               "faults": {"hang_rate": 1.0, "hang_s": 5.0}},
              {**zxing, **limits, "name": "healthy-zxing", "timeout_s": 5.0}]
    path = t.folder / "stuck-registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [], "models": models}))
    registry = Registry.load(path)
    stuck, healthy = registry.models["stuck-zxing"], registry.models["healthy-zxing"]
    image = load_image(t.image)
    healthy.call("decode", (image,), {}, Ledger())  # loaded: the call below times only the call
    start = time.perf_counter()
    healthy.call("decode", (image,), {}, Ledger())
    alone = time.perf_counter() - start

    def timed_out(_: int) -> bool:
        try:
            stuck.call("decode", (image,), {}, Ledger())
        except ExpertTimeout:
            return True
        return False

    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(timed_out, range(12)))
    start = time.perf_counter()
    error = None
    try:
        healthy.call("decode", (image,), {}, Ledger())
    except ExpertTimeout as exc:
        error = str(exc)
    beside = time.perf_counter() - start
    return TrustCase("one expert stuck on every call", "a healthy expert's call is not starved",
                     all(outcomes) and error is None and beside < alone + 1.0,
                     f"{sum(outcomes)}/12 stuck calls timed out; healthy call {'failed: ' + error if error else 'ok'}"
                     f" in {beside:.2f} s (alone {alone:.2f} s)")


def pickled_cache(t: Target) -> TrustCase:
    marker = t.folder / "cache-pickle-ran"
    cache = ExpertCache(t.folder / "planted-cache")
    key = cache_key("call", "zxing", "1", "decode", [], {})
    for suffix in (".pkl", ".json"):
        path = cache.root / key[:2] / f"{key}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(PlantedPickle(marker)))
    hit, _ = cache.get(key)
    return TrustCase("planted pickle in the expert cache", "never unpickled", not hit and not marker.exists(),
                     f"hit {hit}, corrupt entries {cache.stats.corrupt}, "
                     f"marker {'CREATED' if marker.exists() else 'absent'}")


def graph_local_files(t: Target) -> TrustCase:
    """The Agent Server graph (as graphs/maestro.py builds it, with an empty environment: no allowed directories)
    refuses a local path and answers the same image sent as a data URL."""
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources.from_env({}))
    secret = t.folder / "secret.png"
    secret.write_bytes(_png_bytes(t.image))
    refused = [graph.invoke({"question": QUESTION, "images": [ref]}) for ref in ("/etc/passwd", str(secret),
                                                                                 f"file://{secret}")]
    good = graph.invoke({"question": QUESTION, "images": [t.image]})
    ok = all(r["answer"] is None and "local file paths are not accepted" in r["stop_reason"] for r in refused)
    return TrustCase("local file paths through the Agent Server graph", "refused; data URLs answered",
                     ok and good["answer"] == "Wikipedia", f"stops {[r['stop_reason'][:50] for r in refused]}, "
                     f"data URL answered {good['answer']!r}")


def _png_bytes(data_url: str) -> bytes:
    import base64

    return base64.b64decode(data_url.partition(",")[2])


def unauthenticated_start(t: Target) -> TrustCase:
    env = "MAESTRO_TRUST_SUITE_UNSET_KEY"
    os.environ.pop(env, None)
    named = startup_problem(ServeSettings(api_key_env=env), "127.0.0.1", key_env_named=True)
    public = startup_problem(ServeSettings(api_key_env=env), "0.0.0.0", key_env_named=False)
    loopback = startup_problem(ServeSettings(api_key_env=env), "127.0.0.1", key_env_named=False)
    return TrustCase("a named key variable unset, or a public host without a key", "refuses to start",
                     bool(named) and bool(public) and loopback is None,
                     f"named: {'refused' if named else 'STARTS'}; 0.0.0.0: {'refused' if public else 'STARTS'}")


# == Images and operator files (issue 33, items 1, 5 and 7) =====================================================
# Every node that reads an image goes through the image-source policy, whatever wrote the state; what an image may
# make a worker hold is bounded by what is decoded, not by what the file declares; the episode cap answers before
# anything is decoded; files in the operator's folders are read no further than the cap, and only regular ones; a
# SKILL.md cannot hang start-up.

SECRET_TEXT = "MAESTRO-TRUST-SECRET"
"""What a QR code planted outside the allowed directories encodes: it must never appear in a reply."""
COUNT_QUESTION = "How many circles are in the image?"
BOMB_SIDE = 6300
"""A square of this side is 39.7 megapixels: just under `images.MAX_PIXELS`, so the door lets it through."""
BOMB_IMAGES = 8
"""Images in the memory request: `ImageSources.max_images`, the most one request may send."""
IMAGE_MEMORY_LIMIT_MB = 1024.0
"""A request of BOMB_IMAGES images at the pixel cap may add at most this much to the server's RSS."""
SETTLE_S = 5.0
"""How long the RSS is still sampled after the reply: an expert call that timed out is abandoned, not stopped, and
works on its image a little longer."""
SPARSE_FILE_BYTES = 1 << 30
FILE_MEMORY_LIMIT_MB = 100.0
"""What refusing the 1 GB sparse file of an image folder may add to the server's RSS (it was read whole)."""
FRONT_MATTER_LIMIT_S = 2.0
FRONT_MATTER_MESSAGE_CHARS = 2_000


def secret_qr(path: Path) -> Path:
    """A QR code of SECRET_TEXT saved at `path` (WebP, as in the issue): a file whose content would show in a reply
    if a skill read it."""
    code = zxingcpp.write_barcode_to_image(zxingcpp.create_barcode(SECRET_TEXT, zxingcpp.BarcodeFormat.QRCode),
                                           scale=6)
    Image.fromarray(np.asarray(code)).save(path, lossless=True)
    return path


def bomb_urls(count: int) -> list[str]:
    """`count` different two-colour PNGs of BOMB_SIDE x BOMB_SIDE pixels with seven circles, as data URLs of about
    10 KB each: cheap to send, 40 megapixels each to decode (different, so no memo decodes one for another)."""
    return [_bomb_url(shift) for shift in range(count)]


def _bomb_url(shift: int) -> str:
    image = Image.new("L", (BOMB_SIDE, BOMB_SIDE), 255)
    draw = ImageDraw.Draw(image)
    for i in range(7):
        draw.ellipse((300 + 800 * i + shift, 2900, 1000 + 800 * i + shift, 3600), outline=0, width=14)
    buf = io.BytesIO()
    image.convert("P").save(buf, format="PNG", optimize=True)
    return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"


def bomb_request(images: list[str]) -> dict:
    content = [{"type": "text", "text": COUNT_QUESTION}] + [{"type": "image_url", "image_url": {"url": u}}
                                                              for u in images]
    return {"model": "maestro", "messages": [{"role": "user", "content": content}]}


def peak_rss_growth_mb(pid: int, action: Callable[[], T], *, settle_s: float = 0.0) -> tuple[float, float, T]:
    """Run `action` while sampling the RSS of process `pid` every 20 ms, and `settle_s` more seconds after it
    returned: (RSS before in MB, peak growth in MB, what `action` returned). Sampled, because memory a request held
    and gave back no longer shows afterwards."""
    idle = _rss_mb(pid)
    peak, done = idle, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = action()
        time.sleep(settle_s)
    finally:
        done.set()
        sampler.join()
    return idle, max(peak, _rss_mb(pid)) - idle, result


def state_written_images(t: Target) -> TrustCase:
    """A run on an existing thread of the Agent Server graph (as `graphs/served.py` builds it) that writes its own
    images into the state and jumps past intake straight to a skill, sending it a call on them
    (`Command(goto=Send("barcode-reading", ...))`): a QR code outside the allowed directory, /etc/passwd, missing
    files inside and outside it. None is read, and all get the same reply, so a reply says nothing of what exists;
    the same QR code inside the directory is read."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, Send

    allowed = t.folder / "allowed-images"
    allowed.mkdir(exist_ok=True)
    secret = secret_qr(t.folder / "secret.webp")
    inside = secret_qr(allowed / "inside.webp")
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources(allowed_dirs=(allowed,)),
                        checkpointer=InMemorySaver())

    def jump(ref: str, thread: str) -> dict:
        config = {"configurable": {"thread_id": thread}}
        graph.invoke({"question": QUESTION, "images": [t.image]}, config)
        call = {"model": "zxing", "input": "", "question": QUESTION, "images": [ref], "choices": None, "history": []}
        return graph.invoke(Command(goto=Send("barcode-reading", call), update={"images": [ref]}), config)

    refs = [str(secret), f"file://{secret}", "/etc/passwd", str(t.folder / "no-such.webp"),
            str(allowed / "no-such.webp"), str(allowed / ".." / secret.name)]
    replies = [jump(ref, f"jump-{i}") for i, ref in enumerate(refs)]
    leaked = [ref for ref, r in zip(refs, replies) if SECRET_TEXT in str(r) or "root:" in str(r)]
    shapes = {(r["answer"], r["stop_reason"], r["steps"][-1]["error"]) for r in replies}
    read_inside = [s["answer"] for s in jump(str(inside), "jump-inside")["steps"][1:]]
    return TrustCase("images written into a thread's state by a Command that skips intake",
                     "never read outside the allowed directory; one reply for missing and forbidden files",
                     not leaked and len(shapes) == 1 and next(iter(shapes))[0] is None and SECRET_TEXT in read_inside,
                     f"leaked {leaked or 'none'}; {len(shapes)} distinct replies ({sorted(map(str, shapes))[:2]}); "
                     f"the same file inside the directory read as {read_inside}")


def image_memory(t: Target) -> TrustCase:
    """BOMB_IMAGES images of 40 megapixels each (about 10 KB each on the wire) in one request: the server's RSS,
    sampled while it answers, stays within IMAGE_MEMORY_LIMIT_MB of what it held before."""
    bombs = bomb_urls(BOMB_IMAGES)
    with httpx.Client(timeout=600) as client:
        client.post(f"{t.url}/v1/chat/completions", json=bomb_request([t.image]))  # the experts loaded: the baseline
        start = time.perf_counter()
        idle, grown, reply = peak_rss_growth_mb(
            t.pid, lambda: client.post(f"{t.url}/v1/chat/completions", json=bomb_request(bombs)), settle_s=SETTLE_S)
    took = time.perf_counter() - start
    return TrustCase(f"{BOMB_IMAGES} images of {BOMB_SIDE}x{BOMB_SIDE} pixels in one request",
                     f"answered, RSS grows under {IMAGE_MEMORY_LIMIT_MB:g} MB",
                     reply.status_code == 200 and grown < IMAGE_MEMORY_LIMIT_MB,
                     f"status {reply.status_code}, answer {_answer(reply)!r}, RSS peak {grown:+.0f} MB over "
                     f"{idle:.0f} MB, {took:.1f} s")


def cap_before_decoding(t: Target) -> TrustCase:
    """With every episode slot taken (one slot, held by a router endpoint that never answers), a request of
    BOMB_IMAGES images at the pixel cap is refused (429) before any of them is decoded: in a small part of the
    time decoding them takes."""
    bombs = bomb_urls(BOMB_IMAGES)
    start = time.perf_counter()
    for bomb in bombs:
        load_image(bomb)
    decode_s = time.perf_counter() - start
    listener = Listener()
    try:
        settings = ServeSettings(workers=1, max_episodes=1, request_timeout_s=3.0, policy="rules",
                                 policies=("rules", f"hang=lm:openai:http://127.0.0.1:{listener.port}/v1|x"))
        with running_app(create_app(Registry.load(t.registry_file), settings)) as url, ThreadPoolExecutor(1) as pool:
            held = pool.submit(_chat, url, policy="hang", image=t.image)
            while not httpx.get(f"{url}/healthz").json()["episodes_in_flight"] and not held.done():
                time.sleep(0.02)
            start = time.perf_counter()
            reply = httpx.post(f"{url}/v1/chat/completions", json=bomb_request(bombs), timeout=60)
            refused_s = time.perf_counter() - start
            held_status = held.result().status_code
    finally:
        listener.close()
    return TrustCase("a request of images at the pixel cap while every episode slot is taken",
                     "429 before any image is decoded",
                     reply.status_code == 429 and refused_s < decode_s / 4 and held_status == 504,
                     f"status {reply.status_code} after {refused_s:.2f} s (decoding the images takes {decode_s:.2f} s);"
                     f" the held request ended {held_status}")


def operator_folder_files(t: Target) -> TrustCase:
    """A server with an image directory (`--image-dir`) that holds a 1 GB sparse file and a FIFO: the big file is
    refused (413) without being read, the FIFO is refused at once like a missing file (a read would block a worker
    past the request timeout), and a path outside the directory gets that same refusal."""
    folder = t.folder / "operator-images"
    folder.mkdir(exist_ok=True)
    sparse, fifo = folder / "huge.png", folder / "pipe.png"
    with sparse.open("wb") as fh:
        fh.truncate(SPARSE_FILE_BYTES)
    if not fifo.exists():
        os.mkfifo(fifo)
    settings = ServeSettings(workers=1, request_timeout_s=10.0, image_dirs=(folder,))
    with running_app(create_app(Registry.load(t.registry_file), settings)) as url:  # in this process: its RSS
        try:
            _, grown, huge = peak_rss_growth_mb(os.getpid(), lambda: _chat(url, image=str(sparse), timeout=30))
            start = time.perf_counter()
            pipe = _chat(url, image=str(fifo), timeout=30)
            pipe_s = time.perf_counter() - start
            missing, outside = _chat(url, image=str(folder / "no-such.png")), _chat(url, image="/etc/passwd")
        finally:
            with contextlib.suppress(OSError):  # a reader blocked on the FIFO (the fault this checks) gets its EOF
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    refusals = {r.json().get("error", {}).get("message") for r in (pipe, missing, outside)}
    same = len(refusals) == 1 and {r.status_code for r in (pipe, missing, outside)} == {400}
    return TrustCase("a 1 GB sparse file and a FIFO in the operator's image directory",
                     "refused without reading, at once; the FIFO refused like a missing file",
                     huge.status_code == 413 and grown < FILE_MEMORY_LIMIT_MB and same and pipe_s < 5,
                     f"sparse file: {huge.status_code}, RSS {grown:+.0f} MB; FIFO: {pipe.status_code} after "
                     f"{pipe_s:.1f} s; {len(refusals)} distinct refusals for FIFO, missing and outside")


def front_matter_bomb(t: Target) -> TrustCase:
    """A skill folder whose SKILL.md front matter holds a YAML alias bomb (seven levels of nine aliases: five million
    strings, some 30 MB as text) in a metadata value: loading the registry refuses it in moments, with a short
    message naming the file."""
    skills = t.folder / "bomb-skills"
    skill = skills / "bomb"
    skill.mkdir(parents=True, exist_ok=True)
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(6)]
    (skill / "SKILL.md").write_text("---\nname: bomb\ndescription: A skill whose front matter is a bomb.\nx-levels:\n"
                                    + "\n".join(f"  {level}" for level in levels) + "\nmetadata: {tier: '1', requires: "
                                    "ocr, entry: 'skill.py:run', bomb: *g}\n---\nBody.\n")
    (skill / "skill.py").write_text("def run(ctx):\n    return None\n")
    registry_file = t.folder / "bomb-registry.yaml"
    config = yaml.safe_load(t.registry_file.read_text())
    registry_file.write_text(yaml.safe_dump({**config, "skill_dirs": [str(skills)]}))
    outcome: list[str] = []

    def load() -> None:
        try:
            Registry.load(registry_file)
            outcome.append("loaded")
        except ConfigError as exc:  # SkillError is one
            outcome.append(str(exc))

    loader = threading.Thread(target=load, daemon=True)  # the fault this checks would hold it for minutes
    start = time.perf_counter()
    loader.start()
    loader.join(FRONT_MATTER_LIMIT_S * 5)
    took = time.perf_counter() - start
    message = outcome[0] if outcome else ""
    return TrustCase("a SKILL.md whose front matter is a YAML alias bomb", "refused at once with a short message",
                     took < FRONT_MATTER_LIMIT_S and "SKILL.md" in message and len(message) < FRONT_MATTER_MESSAGE_CHARS,
                     f"{'refused' if message and message != 'loaded' else message or 'still loading'} after {took:.2f} s "
                     f"with {len(message):,} characters: {message[:120]!r}")


IMAGE_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (
    state_written_images, image_memory, cap_before_decoding, operator_folder_files, front_matter_bomb,
)
"""The checks of this block, in TRUST_CHECKS."""


# == HTTP bodies and LangServe batches (issue 33, items 3 and 6) ================================================
# A body no valid request resembles (nested past the JSON depth cap, options of megabytes) is refused at once in
# the route's JSON error shape; a LangServe batch or stream that is refused starts no episode and leaves none running.

REFUSAL_LIMIT_S = 2.0
"""How long refusing a hostile body may take (before: 16 s to echo two 5 MB options)."""
IDLE_LIMIT_S = 1.0
"""How soon a refused batch must leave no episode in flight."""


def _post(url: str, path: str, **kwargs) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    reply = httpx.post(f"{url}{path}", timeout=60, **kwargs)
    return reply, time.perf_counter() - start


def _error_code(reply: httpx.Response) -> str | None:
    try:
        return reply.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def hostile_bodies(t: Target) -> TrustCase:
    """JSON nested 100,000 deep (a RecursionError, so a 500, before) and two 5 MB options, on the OpenAI route
    and LangServe's /invoke and /stream where mounted."""
    nested = "[" * 100_000 + "]" * 100_000
    chat = f'{{"model": "maestro", "messages": [{{"role": "user", "content": {nested}}}]}}'.encode()
    options = {"model": "maestro", "choices": ["x" * 5_000_000] * 2,
               "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION},
                                                         {"type": "image_url", "image_url": {"url": t.image}}]}]}
    sent = {"openai nested": _post(t.url, "/v1/chat/completions", content=chat, headers=_JSON),
            "openai options": _post(t.url, "/v1/chat/completions", json=options)}
    if httpx.get(f"{t.url}/healthz", timeout=30).json().get("langserve"):
        nested_input = f'{{"input": {nested}}}'.encode()
        sent["langserve nested"] = _post(t.url, "/maestro/invoke", content=nested_input, headers=_JSON)
        sent["langserve nested stream"] = _post(t.url, "/maestro/stream", content=nested_input, headers=_JSON)
        sent["langserve options"] = _post(t.url, "/maestro/invoke", json={"input": {
            "question": QUESTION, "images": [t.image], "choices": options["choices"]}})
    slowest = max(took for _, took in sent.values())
    ok = all(r.status_code == 400 and _error_code(r) for r, _ in sent.values()) and slowest < REFUSAL_LIMIT_S
    return TrustCase("JSON nested 100,000 deep; two 5 MB options", f"a 400 JSON error within {REFUSAL_LIMIT_S:g} s",
                     ok, ", ".join(f"{name}: {r.status_code} {_error_code(r)}" for name, (r, _) in sent.items())
                     + f"; slowest {slowest:.2f} s")


def refused_batch(t: Target) -> TrustCase:
    """A LangServe batch above the episode cap (100 inputs: 64 episodes kept running before, and the next client
    got a 429), a batch with one refused image, and a stream with a refused policy (a torn chunked response
    before): each is refused with a JSON error, no episode is left in flight, and the next request is answered."""
    attack, must = "LangServe batch over the cap; refused stream", f"JSON 4xx; 0 in flight within {IDLE_LIMIT_S:g} s"
    if not httpx.get(f"{t.url}/healthz", timeout=30).json().get("langserve"):
        return TrustCase(attack, must, False, LANGSERVE_MISSING, skipped=LANGSERVE_MISSING)
    good = {"question": QUESTION, "images": [t.image]}
    attempts = {
        "batch of 100": ("/maestro/batch", {"inputs": [good] * 100}),
        "batch with a refused image": ("/maestro/batch", {"inputs": [good] * 3 + [{**good, "images": ["/etc/passwd"]}]}),
        "stream with a refused policy": ("/maestro/stream", {"input": {**good, "policy": "neural:/etc/passwd"}}),
    }
    details, ok = [], True
    for name, (path, body) in attempts.items():
        reply, _ = _post(t.url, path, json=body)
        start = time.perf_counter()
        while (busy := httpx.get(f"{t.url}/healthz", timeout=30).json()["episodes_in_flight"]) and \
                time.perf_counter() - start < 5:
            time.sleep(0.02)
        idle = time.perf_counter() - start
        ok = ok and 400 <= reply.status_code < 500 and _error_code(reply) is not None and not busy \
            and idle < IDLE_LIMIT_S
        details.append(f"{name}: {reply.status_code} {_error_code(reply)}, idle after {idle:.2f} s")
    answered = _answer(_chat(t.url, image=t.image))
    return TrustCase(attack, must, ok and answered == "Wikipedia",
                     "; ".join(details) + f"; next request answered {answered!r}")


def many_options(t: Target) -> TrustCase:
    """30 options (the 28th was labelled with a backslash, so the scoring regex crashed the episode: a 500): the
    options past Z keep labels that stay labels, and the right one is answered."""
    options = [f"Option {i}" for i in range(29)] + ["Wikipedia"]
    body = {"model": "maestro", "choices": options,
            "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION},
                                                      {"type": "image_url", "image_url": {"url": t.image}}]}]}
    reply, _ = _post(t.url, "/v1/chat/completions", json=body)
    answered = _answer(reply)
    return TrustCase("a question with 30 options", "answered, with the right option",
                     answered in ("Wikipedia", "AD"), f"{reply.status_code}: {answered!r}")


def bad_contexts(t: Target) -> TrustCase:
    """Run contexts of the wrong type or out of bounds, as an Agent Server client sends them (a TypeError inside the
    run before, and any `max_turns` accepted): each ends at intake with the typed input error naming the field,
    before any expert is called."""
    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources())
    contexts = [{"max_turns": "lots"}, {"policy": 123}, {"max_turns": 10**9}, {"max_cost": -1}]
    outcomes = [graph.invoke({"question": QUESTION, "images": [t.image]}, context=c) for c in contexts]
    typed = [str(o["stop_reason"]).startswith("input error") and not o.get("steps") for o in outcomes]
    return TrustCase("run contexts of the wrong type or out of bounds", "the typed input error, no expert called",
                     all(typed), "; ".join(f"{c}: {str(o['stop_reason'])[:120]}" for c, o in zip(contexts, outcomes)))


_JSON = {"Content-Type": "application/json"}

HTTP_DOOR_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (hostile_bodies, refused_batch, many_options,
                                                                bad_contexts)
"""The checks of this block, in TRUST_CHECKS."""


# == Long integers, state written by a Command, operator YAML (issue 46, items 5, 7 and 8) =========================
# An integer longer than Python converts was a 500 on every route; a Command writing a wrong type into a field a
# node reads ended the run with an untyped error; operator YAML could exhaust the stack (nesting), the memory (a
# huge SKILL.md read whole, an alias bomb in a registry file).

LONG_DIGITS = 4301
"""One digit more than Python converts to an int by default (`sys.get_int_max_str_digits()`)."""
OPERATOR_FILE_LIMIT_S = 2.0
"""How long refusing each hostile operator file may take."""


def long_integers(t: Target) -> TrustCase:
    """A body holding an integer of LONG_DIGITS digits, on the OpenAI route and LangServe's /invoke, /batch and
    /stream where mounted: a 400 naming it."""
    huge = "9" * LONG_DIGITS
    question = f'"{QUESTION}"'
    sent = {"openai": _post(t.url, "/v1/chat/completions", headers=_JSON, content=(
        f'{{"model": "maestro", "max_turns": {huge}, "messages": [{{"role": "user", "content": {question}}}]}}'
    ).encode())}
    if httpx.get(f"{t.url}/healthz", timeout=30).json().get("langserve"):
        single = f'{{"input": {{"question": {question}, "images": [], "max_turns": {huge}}}}}'.encode()
        sent["langserve invoke"] = _post(t.url, "/maestro/invoke", content=single, headers=_JSON)
        sent["langserve stream"] = _post(t.url, "/maestro/stream", content=single, headers=_JSON)
        sent["langserve batch"] = _post(t.url, "/maestro/batch", headers=_JSON, content=(
            f'{{"inputs": [{{"question": {question}, "images": [], "extra": [{huge}]}}]}}').encode())
    ok = all(r.status_code == 400 and _error_code(r) == "integer_too_long" for r, _ in sent.values())
    return TrustCase(f"an integer of {LONG_DIGITS:,} digits in a body", "a 400 `integer_too_long` on every route", ok,
                     ", ".join(f"{name}: {r.status_code} {_error_code(r)}" for name, (r, _) in sent.items()))


def state_written_junk(t: Target) -> TrustCase:
    """Commands on an answered thread of the Agent Server graph that write a wrong type into a field a node reads
    and jump to that node (`stop: "bogus"`, junk `steps`), or send a skill node a wrong call (`"x"`): each run ends
    with the typed input error naming the field, and the thread answers its next question."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, Send

    graph = build_graph(Registry.load(t.registry_file), image_sources=ImageSources(), checkpointer=InMemorySaver())
    commands = {"state.stop": Command(goto="answer", update={"stop": "bogus"}),
                "call": Command(goto=Send("barcode-reading", "x")),
                "state.steps": Command(goto="router", update={"steps": [{"junk": 1}]}),
                "state.steps text": Command(goto="answer", update={"steps": "x"})}
    asked, config = {"question": QUESTION, "images": [t.image]}, {"configurable": {"thread_id": "junk"}}
    context = {"policy": "rules"}
    graph.invoke(asked, config, context=context)
    outcomes = {}
    for name, command in commands.items():
        try:
            outcomes[name] = str(graph.invoke(command, config, context=context).get("stop_reason"))
        except Exception as exc:  # the untyped error this check looks for: recorded as the outcome
            outcomes[name] = f"{exc.__class__.__name__}: {exc}"
    after = graph.invoke(asked, config, context=context).get("answer")
    ok = after == "Wikipedia" and all(reason.startswith(f"input error: {name.split()[0]}")
                                      for name, reason in outcomes.items())
    return TrustCase("a Command that writes a wrong type into the state", "the typed input error naming the field",
                     ok, "; ".join(f"{name}: {reason[:90]!r}" for name, reason in outcomes.items())
                     + f"; the next question answered {after!r}")


def operator_yaml(t: Target) -> TrustCase:
    """Operator files that took a process down: SKILL.md front matter nested 8,000 levels (a RecursionError), a
    300 MB SKILL.md (read whole: 841 MB), an alias bomb in a registry YAML (6 GB in 60 s): each is a ConfigError
    naming the file, within OPERATOR_FILE_LIMIT_S."""
    root = t.folder / "operator-yaml"
    front = "name: {name}\ndescription: A hostile skill.\nmetadata: {{tier: '1', requires: ocr, entry: 'skill.py:run'}}"
    files = {}
    for name, extra in (("nested", "\nx: " + "[" * 8000 + "]" * 8000), ("huge", "")):
        skill = root / "skills" / name
        skill.mkdir(parents=True, exist_ok=True)
        (skill / "skill.py").write_text("def run(ctx):\n    return None\n")
        (skill / "SKILL.md").write_text(f"---\n{front.format(name=name)}{extra}\n---\nBody.\n")
        files[name] = root / f"{name}-registry.yaml"
        files[name].write_text(yaml.safe_dump({"extends": "default", "skill_dirs": [str(skill.parent)],
                                               "skills": [name]}))
    with (root / "skills" / "huge" / "SKILL.md").open("r+b") as fh:
        fh.truncate(300_000_000)  # 300 MB that take no disk
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(6)]
    files["alias bomb"] = root / "bomb-registry.yaml"
    files["alias bomb"].write_text("extends: default\nx:\n" + "\n".join(f"  {v}" for v in levels) + "\nmodels: *g\n")
    outcomes = {}
    for name, registry_file in files.items():
        outcome: list[str] = []

        def load(path: Path = registry_file) -> None:
            try:
                Registry.load(path)
                outcome.append("loaded")
            except ConfigError as exc:
                outcome.append(f"ConfigError: {exc}")
            except BaseException as exc:  # the untyped failure this check looks for: recorded as the outcome
                outcome.append(f"{exc.__class__.__name__}: {str(exc)[:200]}")

        loader = threading.Thread(target=load, daemon=True)  # the faults this checks would hold it for minutes
        start = time.perf_counter()
        loader.start()
        loader.join(OPERATOR_FILE_LIMIT_S * 5)
        outcomes[name] = (outcome[0] if outcome else "still loading", time.perf_counter() - start)
    ok = all(message.startswith("ConfigError: file ") and "\n" not in message and took < OPERATOR_FILE_LIMIT_S
             for message, took in outcomes.values())
    return TrustCase("SKILL.md nested 8,000 deep or of 300 MB; an alias bomb in a registry YAML",
                     f"a one-line ConfigError within {OPERATOR_FILE_LIMIT_S:g} s",
                     ok, "; ".join(f"{name}: {message[:110]!r} after {took:.2f} s"
                                   for name, (message, took) in outcomes.items()))


INPUT_AND_FILE_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (long_integers, state_written_junk, operator_yaml)
"""The checks of this block, in TRUST_CHECKS."""


TRUST_CHECKS: tuple[Callable[[Target], TrustCase], ...] = (
    pickled_checkpoint, file_probing, internal_requests, langserve_door, policy_memory, hanging_endpoint, stuck_expert,
    pickled_cache, graph_local_files, unauthenticated_start, *IMAGE_CHECKS, *HTTP_DOOR_CHECKS, *INPUT_AND_FILE_CHECKS,
)


def run_trust_suite(folder: Path, registry_file: Path, qr_image: Path,
                    progress: Callable[[str], None] = lambda _m: None,
                    checks: Sequence[Callable[[Target], TrustCase]] = TRUST_CHECKS) -> list[TrustCase]:
    """Every check of `checks` against a `maestro serve` app on loopback in this process (default settings: the
    shipped policies offered, data URLs only)."""
    if (module := missing_package("fastapi", "uvicorn")) is not None:  # nothing to attack without a server
        reason = missing_extra("serve", "the trust-boundary suite", module)
        return [TrustCase(check.__name__, "a served Maestro", False, reason, skipped=reason) for check in checks]
    folder.mkdir(parents=True, exist_ok=True)
    image = image_to_data_url(load_image(str(qr_image)))
    cases = []
    with running_app(create_app(Registry.load(registry_file), ServeSettings())) as url:
        target = Target(url, os.getpid(), folder, image, registry_file)
        for check in checks:
            progress(f"trust boundary: {check.__name__}")
            try:
                cases.append(check(target))
            except Exception as exc:  # the suite's boundary: a check that crashed is a failed check, recorded
                cases.append(TrustCase(check.__name__, "completes", False, f"{exc.__class__.__name__}: {exc}"))
    return cases
