"""Images through the Agent Server's door: a real `langgraph dev` with `MAESTRO_IMAGE_DIRS` set,
attacked with langgraph_sdk as a client would. A run on an existing thread may send a `Command` that writes its
own images into the state and jumps straight to a skill node, past `intake`; the skill must still see only what
the image-source policy allows, and the reply must not tell a missing file from a forbidden one."""

from __future__ import annotations

import asyncio
import json

import pytest
from servers import EXAMPLES, data_url, langgraph_dev

from maestro_graph.operations.reliability.image_checks import SECRET_TEXT, secret_qr

pytestmark = pytest.mark.slow

QR_QUESTION = "What text does the QR code encode?"


def test_a_command_that_skips_intake_reads_no_file_outside_the_image_dirs(tmp_path):
    from langgraph_sdk import get_client

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    secret = secret_qr(tmp_path / "secret.webp")  # outside the allowed directory: never to be read for a client
    inside = secret_qr(allowed / "inside.webp")
    refs = {"secret": str(secret), "passwd": "/etc/passwd", "missing": str(tmp_path / "missing.webp"),
            "missing inside": str(allowed / "missing.webp"), "escape": str(allowed / ".." / secret.name),
            "inside": str(inside)}

    async def jump(client, ref: str) -> dict:
        """One answered run on a new thread, then the hostile run: images written by the command, intake skipped."""
        thread = (await client.threads.create())["thread_id"]
        first = await client.runs.wait(thread, "maestro", input={"question": QR_QUESTION,
                                                                 "images": [data_url(EXAMPLES / "qrcode.png")]},
                                       context={"policy": "rules"})
        assert first["answer"] == "Wikipedia"
        call = {"model": "zxing", "input": "", "question": QR_QUESTION, "images": [ref], "choices": None,
                "history": []}
        return await client.runs.wait(thread, "maestro", context={"policy": "rules"},
                                      command={"goto": {"node": "barcode-reading", "input": call},
                                               "update": {"images": [ref]}})

    async def attack(url: str) -> dict[str, dict]:
        client = get_client(url=url)
        return {name: await jump(client, ref) for name, ref in refs.items()}

    with langgraph_dev(tmp_path, env={"MAESTRO_IMAGE_DIRS": str(allowed)}) as url:
        replies = asyncio.run(attack(url))

    assert SECRET_TEXT in [s["answer"] for s in replies.pop("inside")["steps"]]  # the operator's folder is readable
    for name, reply in replies.items():
        assert SECRET_TEXT not in json.dumps(reply) and "root:" not in json.dumps(reply), name
        assert reply["answer"] is None and reply["stop_reason"].startswith("input error: image 0: local file paths")
    seen = {name: (r["answer"], r["stop_reason"], [s["error"] for s in r["steps"][1:]]) for name, r in replies.items()}
    assert len(set(map(json.dumps, seen.values()))) == 1, seen  # no existence oracle: one reply for every path
