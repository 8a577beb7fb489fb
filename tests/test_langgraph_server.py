"""`langgraph dev` serves the exported graph offline on loopback; a real SDK client runs an episode on it."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from maestro_graph.trust_suite import Listener
from servers import data_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("lg") / "server.log"
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    langgraph = Path(sys.executable).parent / "langgraph"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port), "--host", "127.0.0.1"],
            cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"langgraph dev exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail(f"langgraph dev did not start: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_sdk_runs_an_episode_with_streamed_steps(server_url):
    from langgraph_sdk import get_client

    async def go():
        client = get_client(url=server_url)
        assistants = await client.assistants.search(graph_id="maestro")
        assert assistants, "the maestro graph is registered"
        thread = await client.threads.create()
        payload = {"question": "How many circles are in the image?", "images": [data_url(ROOT / "examples/circles.png")]}
        events = [
            chunk async for chunk in client.runs.stream(
                thread["thread_id"], "maestro", input=payload, stream_mode=["custom", "values"],
                context={"max_turns": 3, "policy": "rules"},
            )
        ]
        custom = [c.data for c in events if c.event == "custom"]
        assert any(e["event"] == "step" and e["skill"] == "counting" for e in custom)
        state = await client.threads.get_state(thread["thread_id"])
        return state["values"]

    values = asyncio.run(go())
    assert values["answer"] == "7"


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_agent_server_runs_accept_only_what_the_operator_offers(server_url, tmp_path):
    """Attacks through the run context and the input of the real Agent Server graph: a pickled checkpoint named as
    the policy, an LM endpoint on an internal port, a local file path. Each run ends with its reason (no internal
    error), nothing is unpickled, nothing connects, nothing is read."""
    from langgraph_sdk import get_client

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(_Evil(marker)))
    listener = Listener()
    qr = data_url(ROOT / "examples/qrcode.png")
    question = "What text does the QR code encode?"

    async def run(payload: dict, context: dict) -> dict:
        client = get_client(url=server_url)
        return await client.runs.wait(None, "maestro", input=payload, context=context)

    try:
        runs = [asyncio.run(run({"question": question, "images": [qr]}, {"policy": policy}))
                for policy in (f"neural:{evil}", f"lm:openai:http://127.0.0.1:{listener.port}/v1|x")]
        local = asyncio.run(run({"question": question, "images": ["/etc/passwd"]}, {"policy": "rules"}))
        good = asyncio.run(run({"question": question, "images": [qr]}, {"policy": "neural"}))
    finally:
        listener.close()
    for values in runs:
        assert values["answer"] is None and "is not offered here; choose one of: neural, rules" in values["stop_reason"]
    assert local["answer"] is None and "local file paths are not accepted" in local["stop_reason"]
    assert "root:" not in str(local)
    assert good["answer"] == "Wikipedia"
    assert not marker.exists() and listener.connections == 0
