"""Real servers on loopback ports chosen at run time, for the serving tests: `maestro serve` (in this process with
uvicorn in a thread, or as a subprocess that a test may kill), `langgraph dev`, a vLLM server, and a registry whose
OCR expert is slow (the faulty experts of tests/fakes.py) so an episode can be caught mid-way."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from maestro_graph.doors.serve.loopback import free_port
from maestro_graph.doors.serve.loopback import wait_until_up as _wait_until_up

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SLOW_QUESTION = "What text is written in the image?"


def data_url(path: Path) -> str:
    return f"data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}"


def wait_until_up(url: str, *, proc: subprocess.Popen | None = None, log: Path | None = None,
                  timeout_s: float = 120) -> None:
    def alive() -> None:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-3000:] if log else ''}")

    _wait_until_up(url, timeout_s=timeout_s, alive=alive)


def server_env() -> dict[str, str]:
    """The subprocess environment: one thread per library, offline, this checkout's package imported (not the one an
    editable install of another checkout points at) and tests/ importable (for fakes:...)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1"}


@contextlib.contextmanager
def maestro_serve(args: list[str], log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`maestro serve ARGS` as a subprocess on a free port; yields (process, base URL) and stops it afterwards."""
    port = free_port()
    maestro = Path(sys.executable).parent / "maestro"
    with log.open("a") as fh:
        proc = subprocess.Popen([str(maestro), "serve", "--port", str(port), "--log-level", "warning", *args],
                                cwd=ROOT, env=server_env(), stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/healthz", proc=proc, log=log)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


@contextlib.contextmanager
def langgraph_dev(folder: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`langgraph dev` serving this repository's langgraph.json from `folder` (its `.langgraph_api/` state goes there,
    not into the repository): the config is copied with its graph paths made absolute. Yields the base URL."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    config["graphs"] = {name: str(ROOT / spec.removeprefix("./")) for name, spec in config["graphs"].items()}
    config["dependencies"] = [str(ROOT)]
    (folder / "langgraph.json").write_text(json.dumps(config))
    port, log = free_port(), folder / "server.log"
    langgraph = Path(sys.executable).parent / "langgraph"
    with log.open("w") as fh:
        proc = subprocess.Popen([str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port), "--host",
                                 "127.0.0.1", "--config", str(folder / "langgraph.json")],
                                cwd=folder, env={**server_env(), **(env or {})}, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/ok", proc=proc, log=log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def vllm_server(command: list[str], port: int, log: Path, *, timeout_s: float,
                cwd: Path | None = None) -> Iterator[float]:
    """A vLLM OpenAI server started by `command` (`vllm serve ...`, or a script that runs it) listening on loopback
    `port`: waits until its `/health` answers, failing with the log's tail if it exits or is not up within
    `timeout_s` (start-up is minutes on shared cores); yields the seconds start-up took; stops it with SIGTERM, and
    SIGKILL if it has not exited a minute later."""
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/health", proc=proc, log=log, timeout_s=timeout_s)
        yield time.perf_counter() - start
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def processes() -> dict[int, tuple[int, int]]:
    """Every live process of this machine (zombies left out) as pid -> (parent pid, session id), read from /proc."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it exited while being read
            continue
        state, parent, _group, session = text[text.rindex(")") + 2:].split()[:4]
        if state != "Z":
            found[int(stat.parent.name)] = (int(parent), int(session))
    return found


def descendants(pid: int) -> set[int]:
    """The live processes started by `pid`, their children, and so on."""
    tree = processes()
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = {child for child, (ppid, _) in tree.items() if ppid == parent} - found
        found |= children
        frontier.extend(children)
    return found


def slow_messages() -> list[dict]:
    """The chat request of a `slow_registry` episode: the slow question about an example image."""
    image = {"type": "image_url", "image_url": {"url": data_url(EXAMPLES / "circles.png")}}
    return [{"role": "user", "content": [{"type": "text", "text": SLOW_QUESTION}, image]}]


def stream_slow_episode(client, thread_id: str, on_slow_step, seen: list) -> None:
    """Stream a `slow_registry` episode on `thread_id` with an `openai` client, appending each chunk's Maestro event
    to `seen`, and call `on_slow_step()` when the router decides for the slow second step (to kill a server or
    stop its database while that step runs)."""
    for chunk in client.chat.completions.create(model="maestro", messages=slow_messages(), stream=True,
                                                extra_body={"thread_id": thread_id}):
        event = chunk.model_extra.get("maestro") or {}
        seen.append(event.get("event"))
        if event.get("event") == "decision" and event["action"].get("pair") == "slow-ocr@@text-reading":
            on_slow_step()


def slow_registry(folder: Path, *, delay_s: float, calls: Path | None = None) -> Path:
    """A registry of two OCR experts on the real `text-reading` skill: a cheap one that crashes (the keyword-rules
    policy tries it first, then moves on) and one that answers only after `delay_s` (and logs each call to `calls`,
    when given). An episode therefore has a finished first step and a slow second one."""
    path = folder / "slow_registry.yaml"
    logged = f', calls: "{calls}"' if calls else ""
    path.write_text(f"""\
skill_dirs: ["{ROOT / 'skills'}"]
skills: [text-reading, ocr, zoom]
models:
  - name: crashing-ocr
    description: An OCR engine that always crashes (test fake).
    capabilities: [ocr]
    backend: {{type: python, entry: "fakes:CrashingOCRExpert"}}
    cost: {{per_call: 0.01}}
    cacheable: false
  - name: slow-ocr
    description: An OCR engine that answers only after a delay (test fake).
    capabilities: [ocr]
    backend: {{type: python, entry: "fakes:HangingOCRExpert", options: {{delay_s: {delay_s}{logged}}}}}
    cost: {{per_call: 0.5}}
    timeout_s: 120
    cacheable: false
""")
    return path
