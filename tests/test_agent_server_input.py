"""Every field of the Agent Server's run input and of a `Command` update, written with a wrong
type, is a typed input error that `langgraph_sdk` reports as such (never a TypeError or NotImplementedError from
inside the graph); a `goto` to no node, an update of no channel, a write that is not a list to a field that grows
by lists and a `resume` (the graph never interrupts) are refused instead of returning the previous run's answer or
failing inside LangGraph. Swept through the SDK against a real `langgraph dev`, with the values, commands and rule of
`maestro reliability`'s check (`maestro_graph.operations.reliability.agent_input`), which the last test runs as the
suite does."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from servers import data_url, langgraph_dev

from maestro_graph.operations.reliability.agent_input import (
    COMMAND_REFUSALS,
    REFUSED,
    WRONG_INPUT,
    agent_server_input,
    typed_input_error,
)
from maestro_graph.operations.reliability.registries import fault_registry
from maestro_graph.operations.reliability.target import Target

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What text does the QR code encode?"
CONTEXT = {"policy": "rules"}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lg-input")
    with langgraph_dev(folder) as url:
        yield url
    log = (folder / "server.log").read_text()
    assert "TypeError" not in log and "NotImplementedError" not in log, log[-3000:]


async def _stream(client, thread: str | None, **run) -> list:
    return [c async for c in client.runs.stream(thread, "maestro", context=CONTEXT,
                                                stream_mode=["custom", "values"], **run)]


def _typed(chunks: list) -> str:
    """What the run said of its input, judged by the reliability suite's rule (`typed_input_error`): the typed
    input error's message, or the refusal `BadRunInput: <why>`. Fails on anything else."""
    typed, said = typed_input_error([(c.event, c.data) for c in chunks])
    assert typed, (said, chunks)
    return said


def test_every_input_field_of_the_wrong_type_is_a_typed_input_error(server_url):
    from langgraph_sdk import get_client

    qr = data_url(ROOT / "examples/qrcode.png")

    async def go() -> dict:
        client = get_client(url=server_url)
        said = {}
        for field, values in WRONG_INPUT.items():
            for value in values:
                run_input = {"question": QUESTION, "images": [qr], field: value}
                said[field, repr(value)] = _typed(await _stream(client, None, input=run_input))
        return said

    said = asyncio.run(go())
    for (field, value), message in said.items():
        assert field in message, f"input.{field} = {value}: {message}"
    assert said["images", "5"] == "state.images: Input should be a valid list (got 5)"
    assert said["messages", "5"].startswith(f"{REFUSED}: input.messages: expected chat messages")


def test_every_command_update_of_the_wrong_type_is_a_typed_input_error(server_url):
    """A `Command` writes the wrong value into a field of an answered thread and sends the run to the router, which
    reads it: the run ends with the typed input error naming the field (or is refused, for messages), and the next
    question on the thread is answered."""
    from langgraph_sdk import get_client

    qr = {"question": QUESTION, "images": [data_url(ROOT / "examples/qrcode.png")]}

    async def go() -> tuple[dict, list]:
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, "maestro", input=qr, context=CONTEXT)
        said, answers = {}, []
        for field, values in WRONG_INPUT.items():
            for value in values[:3]:
                command = {"update": {field: value}, "goto": "router"}
                said[field, repr(value)] = _typed(await _stream(client, thread, command=command))
                answers.append((await client.runs.wait(thread, "maestro", input=qr, context=CONTEXT))["answer"])
        return said, answers

    said, answers = asyncio.run(go())
    for (field, value), message in said.items():
        assert field in message, f"update.{field} = {value}: {message}"
    assert answers == ["Wikipedia"] * len(answers)


def test_images_written_wrong_by_a_command_are_the_next_questions_typed_input_error(server_url):
    """The case: `Command(update={"images": 5})` on an answered thread, then a question that sends no image
    (so the state's `images` is read): the typed input error, not a TypeError; the thread then answers again."""
    from langgraph_sdk import get_client

    qr = {"question": QUESTION, "images": [data_url(ROOT / "examples/qrcode.png")]}

    async def go() -> tuple[list, dict]:
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, "maestro", input=qr, context=CONTEXT)
        await client.runs.wait(thread, "maestro", command={"update": {"images": 5}})
        chunks = await _stream(client, thread, input={"question": QUESTION})
        return chunks, await client.runs.wait(thread, "maestro", input={"question": QUESTION}, context=CONTEXT)

    chunks, after = asyncio.run(go())
    assert _typed(chunks) == "state.images: Input should be a valid list (got 5)"
    assert after["answer"] == "Wikipedia"  # about the thread's image again


@pytest.mark.parametrize("command, refusal", COMMAND_REFUSALS.values(), ids=COMMAND_REFUSALS.keys())
def test_a_command_naming_what_the_graph_lacks_is_refused_not_answered_from_the_last_run(server_url, command,
                                                                                         refusal):
    from langgraph_sdk import get_client

    qr = {"question": QUESTION, "images": [data_url(ROOT / "examples/qrcode.png")]}

    async def go() -> list:
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, "maestro", input=qr, context=CONTEXT)
        return await _stream(client, thread, command=command)

    message = _typed(asyncio.run(go()))
    assert message.startswith(f"{REFUSED}: {refusal}"), message


def test_an_unknown_input_field_is_refused(server_url):
    from langgraph_sdk import get_client

    async def go() -> list:
        return await _stream(get_client(url=server_url), None, input={"question": QUESTION, "image": ["x"]})

    message = _typed(asyncio.run(go()))
    assert message.startswith(f"{REFUSED}: input.image: the graph has no such field; it takes choices, history, "
                              "images, messages, question"), message


def test_a_threads_checkpoints_hold_image_references_not_data_urls(server_url):
    """On the Agent Server's checkpointer: the graph puts a run's input images into the server's
    store before the run, so no checkpoint of the thread, its input's included, holds an image's bytes; a follow-up
    that sends no image is still about the thread's image."""
    from langgraph_sdk import get_client

    qr = data_url(ROOT / "examples/qrcode.png")

    async def go() -> tuple[dict, dict, list]:
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        first = await client.runs.wait(thread, "maestro", input={"question": QUESTION, "images": [qr]}, context=CONTEXT)
        again = await client.runs.wait(thread, "maestro", input={"question": "What does the QR code say?"},
                                       context=CONTEXT)
        return first, again, await client.threads.get_history(thread, limit=100)

    first, again, history = asyncio.run(go())
    assert first["answer"] == again["answer"] == "Wikipedia"
    assert len(history) > 4 and "data:image" not in json.dumps(history)


def test_the_reliability_suites_input_check_holds(tmp_path):
    """`maestro reliability`'s check (`agent_server_input`): the same values and commands, through the Agent Server
    graph in its own process, on the suite's registry of fast experts."""
    target = Target("", os.getpid(), tmp_path, data_url(ROOT / "examples/qrcode.png"), fault_registry(tmp_path, None))
    case = agent_server_input(target)
    assert case.ok, case.detail
