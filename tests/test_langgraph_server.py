"""`langgraph dev` serves the exported graph offline on loopback; a real SDK client runs an episode on it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

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
        payload = {"question": "How many circles are in the image?", "images": [str(ROOT / "examples/circles.png")]}
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
