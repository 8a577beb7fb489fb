"""`maestro serve --log-format json` as an operator runs it (a subprocess, its stderr a log file): every line is one
JSON object, whatever the libraries print (transformers' progress bars, Python warnings, LangGraph's serializer
warnings); a client that disconnects is one INFO line with its request id, and no error line lacks one."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import pytest
from servers import EXAMPLES, data_url, maestro_serve

pytestmark = pytest.mark.slow


def _user(text: str, image: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": data_url(EXAMPLES / image)}}]}]


def test_json_logs_are_one_object_per_line_with_request_ids(tmp_path, monkeypatch):
    """The run loads a transformers model (its "Loading weights" bar), reads a checkpoint back
    (LangGraph's warning about unregistered types), shows Python's deprecation warnings (PYTHONWARNINGS=default,
    as a developer runs it), and has a client drop a request half-sent (a traceback at ERROR, twice, without a
    request id, before)."""
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    log = tmp_path / "serve.log"
    args = ["--log-level", "info", "--log-format", "json", "--checkpoint-db", str(tmp_path / "threads.sqlite"),
            "--allow-policy", "rules", "--allow-policy", "chat=fixed:smollm2@@general-qa", "--policy", "rules"]
    with maestro_serve(args, log) as (_, url):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        qr = _user("What text does the QR code encode?", "qrcode.png")
        for _ in range(2):  # the second request on the thread reads its checkpoint back
            reply = client.chat.completions.create(model="maestro", messages=qr, extra_body={"thread_id": "logs-1"})
            assert reply.choices[0].message.content == "Wikipedia"
        chat = client.chat.completions.create(model="maestro", messages=_user("Say hello.", "circles.png"),
                                              extra_body={"policy": "chat"})  # loads the chat model
        assert chat.model_extra["maestro"]["steps"][0]["model"] == "smollm2"
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as half_sent:
            half_sent.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 1000\r\n\r\n{\"model\":")
            time.sleep(0.3)
        deadline = time.monotonic() + 10
        while "client disconnected" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        httpx.get(f"{url}/healthz")

    text = log.read_text()
    lines = []
    for raw in text.splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {raw[:200]!r}")
    assert all(isinstance(line, dict) and {"level", "message", "request_id"} <= set(line) for line in lines)
    assert "Loading weights" not in text and "unregistered type" not in text
    assert not [line for line in lines if line["level"] == "error" and line["request_id"] is None]
    gone = [line for line in lines if "client disconnected" in line["message"]]
    assert len(gone) == 1 and gone[0]["level"] == "info" and gone[0]["request_id"] and "exception" not in gone[0]
    assert not [line for line in lines if line["level"] == "error"]
