"""The trust-boundary suite of `maestro reliability`: each attack a client could make on a served Maestro, run
for real against a server on loopback, with what must not happen measured directly (a marker file a pickle would
create, file contents in a reply, connections counted by a listener of the suite's own, the process's RSS, the
time a good request waits).

Who is trusted: the operator (registry, checkpoints, server settings) and skill authors. Who is not: HTTP clients,
task files, images and expert outputs. The checks take a `Target` (a served base URL and the server's process id),
so the tests run the same checks against a `maestro serve` subprocess.
"""

from __future__ import annotations

import os
import pickle
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

from ...backends.packages import missing_package
from ...cache.store import ExpertCache
from ...core.environment import TRUST_SUITE_UNSET_KEY
from ...digests import cache_key
from ...doors.serve import ServeSettings, create_app, startup_problem
from ...doors.serve.loopback import running_app
from ...episode.graph import build_graph
from ...errors import ConfigError, ExpertTimeout, missing_extra
from ...images.load import image_to_data_url, load_image
from ...images.sources import ImageSources
from ...registry import Registry, load_config
from ...registry.handles import Ledger
from .image_checks import IMAGE_CHECKS
from .input_checks import HTTP_DOOR_CHECKS, INPUT_AND_FILE_CHECKS
from .target import (
    LANGSERVE_MISSING,
    QUESTION,
    Listener,
    PlantedPickle,
    Target,
    TrustCase,
    answer_of,
    chat,
    langserve_mounted,
    rss_mb,
)

__all__ = ["TRUST_CHECKS", "run_trust_suite"]

MEMORY_NAMES = 600
MEMORY_LIMIT_MB = 50.0


def _langserve(url: str, policy: str, image: str) -> httpx.Response:
    return httpx.post(f"{url}/maestro/invoke", timeout=60,
                      json={"input": {"question": QUESTION, "images": [image], "policy": policy}})


# -- the checks ------------------------------------------------------------------------------------------------
def pickled_checkpoint(t: Target) -> TrustCase:
    marker = t.folder / "pickle-ran"
    replies = []
    for name in ("planted.pt", "planted.safetensors"):
        path = t.folder / name
        path.write_bytes(pickle.dumps(PlantedPickle(marker)))
        replies.append(chat(t.url, policy=f"neural:{path}", image=t.image))
        try:  # the operator's own path (`maestro ask --policy neural:FILE`): the loader reads no pickle
            from ...policy.neural import NeuralPolicy

            NeuralPolicy.load(path)
            loaded = True
        except ConfigError:
            loaded = False
    refused = all(r.status_code == 400 and "invalid_policy" in r.text for r in replies) and not loaded
    return TrustCase("pickle as policy checkpoint (HTTP, loader)", "never unpickled",
                     refused and not marker.exists(),
                     f"statuses {[r.status_code for r in replies]}, "
                     f"marker {'CREATED' if marker.exists() else 'absent'}")


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
        reply = chat(t.url, policy=name, image=t.image)
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
        statuses = [chat(t.url, policy=f"lm:openai:{base}/v1|x{c}", image=t.image).status_code
                    for c in ("", "#choice", "#regex")]
        statuses.append(chat(t.url, image=f"{base}/internal.png").status_code)
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
    if not langserve_mounted(t.url):
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


def policy_memory(t: Target) -> TrustCase:
    chat(t.url, image=t.image)  # models loaded: the baseline
    with httpx.Client(timeout=30) as client:
        def send(i: int) -> int:
            return client.post(f"{t.url}/v1/chat/completions", json={
                "model": "maestro", "policy": f"fixed:zxing@@barcode-reading-{i}",
                "messages": [{"role": "user", "content": QUESTION}]}).status_code

        statuses = {send(i) for i in range(50)}
        before = rss_mb(t.pid)
        statuses |= {send(i) for i in range(50, 50 + MEMORY_NAMES)}
    grown = rss_mb(t.pid) - before
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
            chat(url, image=t.image)
            start = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                stuck = [r.status_code for r in pool.map(lambda _: chat(url, policy="hang", image=t.image), range(2))]
            while httpx.get(f"{url}/healthz").json()["episodes_in_flight"] and time.perf_counter() - start < 10:
                time.sleep(0.05)
            freed = time.perf_counter() - start
            good = answer_of(chat(url, image=t.image, timeout=30))
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
    env = TRUST_SUITE_UNSET_KEY.name
    TRUST_SUITE_UNSET_KEY.unset()
    named = startup_problem(ServeSettings(api_key_env=env), "127.0.0.1", key_env_named=True)
    public = startup_problem(ServeSettings(api_key_env=env), "0.0.0.0", key_env_named=False)
    loopback = startup_problem(ServeSettings(api_key_env=env), "127.0.0.1", key_env_named=False)
    return TrustCase("a named key variable unset, or a public host without a key", "refuses to start",
                     bool(named) and bool(public) and loopback is None,
                     f"named: {'refused' if named else 'STARTS'}; 0.0.0.0: {'refused' if public else 'STARTS'}")


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
