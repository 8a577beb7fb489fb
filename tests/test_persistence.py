"""Killing `maestro serve` in the middle of an episode and starting it again on the same SQLite checkpoint file
resumes the thread from its last step: the finished step is kept as it was, the rest runs, the history reads back."""

from __future__ import annotations

import httpx
import openai
import pytest
from servers import maestro_serve, slow_messages, slow_registry, stream_slow_episode

pytestmark = pytest.mark.slow


def test_killed_server_resumes_the_thread_after_restart(tmp_path):
    registry = slow_registry(tmp_path, delay_s=4.0)
    db = tmp_path / "checkpoints.sqlite"
    args = ["--registry", str(registry), "--checkpoint-db", str(db), "--policy", "rules"]  # rules: crashing-ocr first
    log = tmp_path / "serve.log"
    messages = slow_messages()

    with maestro_serve(args, log) as (proc, url):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        seen = []
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            # SIGKILL while the slow second step runs: no chance to clean up
            stream_slow_episode(client, "t-crash", lambda: (proc.kill(), proc.wait(timeout=10)), seen)
        assert seen.count("step") == 1  # the first step finished (and was checkpointed) before the kill

    with maestro_serve(args, log) as (_, url):
        before = httpx.get(f"{url}/v1/threads/t-crash").json()
        assert before["finished"] is False and before["answer"] is None
        assert [s["model"] for s in before["steps"]] == ["crashing-ocr"]

        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model="maestro", messages=messages, extra_body={"thread_id": "t-crash"})
        trace = reply.model_extra["maestro"]
        assert trace["resumed"] is True and trace["thread_id"] == "t-crash"
        assert trace["steps"][0] == before["steps"][0]  # the step done before the crash is kept, not re-run
        assert [s["model"] for s in trace["steps"]] == ["crashing-ocr", "slow-ocr"]
        assert reply.choices[0].message.content == "late"

        after = httpx.get(f"{url}/v1/threads/t-crash").json()
        assert after["finished"] is True and after["answer"] == "late"
        assert len(after["checkpoints"]) > len(before["checkpoints"])
