"""`langgraph dev` serves the exported graph offline on loopback; a real SDK client runs an episode on it."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest
from servers import data_url, langgraph_dev

from maestro_graph.core.configs import MAX_TURNS
from maestro_graph.core.question_text import EMPTY_QUESTION
from maestro_graph.operations.reliability.target import Listener, PlantedPickle

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_folder(tmp_path_factory) -> Path:
    """Where the server keeps its state and its log (`server.log`)."""
    return tmp_path_factory.mktemp("lg")


@pytest.fixture(scope="module")
def server_url(server_folder):
    with langgraph_dev(server_folder) as url:
        yield url


def test_sdk_runs_an_episode_with_streamed_steps(server_url):
    from langgraph_sdk import get_client

    async def go():
        client = get_client(url=server_url)
        assistants = await client.assistants.search(graph_id="maestro")
        assert assistants, "the maestro graph is registered"
        thread = await client.threads.create()
        payload = {"question": "How many circles are in the image?",
                   "images": [data_url(ROOT / "examples/circles.png")]}
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


def test_agent_server_runs_accept_only_what_the_operator_offers(server_url, tmp_path):
    """Attacks through the run context and the input of the real Agent Server graph: a pickled checkpoint named as
    the policy, an LM endpoint on an internal port, a local file path. Each run ends with its reason (no internal
    error), nothing is unpickled, nothing connects, nothing is read."""
    from langgraph_sdk import get_client

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(PlantedPickle(marker)))
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


def test_a_thread_answers_each_new_question_and_keeps_the_history(server_url):
    """In Studio's terms: run 2 on a thread (as `question`, then as a chat message) answers the NEW
    question; the thread keeps every episode, and a chat run gets its answer as an AI message."""
    from langgraph_sdk import get_client

    async def go():
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        circles = {"question": "How many circles are in the image?",
                   "images": [data_url(ROOT / "examples/circles.png")]}
        qr = {"question": "What text does the QR code encode?", "images": [data_url(ROOT / "examples/qrcode.png")]}
        first = await client.runs.wait(thread, "maestro", input=circles, context={"policy": "rules"})
        second = await client.runs.wait(thread, "maestro", input=qr, context={"policy": "rules"})
        chat = {"messages": [{"role": "human", "content": [
            {"type": "text", "text": "How many circles are in the image?"},
            {"type": "image_url", "image_url": {"url": circles["images"][0]}}]}]}
        third = await client.runs.wait(thread, "maestro", input=chat, context={"policy": "rules"})
        return first, second, third

    first, second, third = asyncio.run(go())
    assert (first["answer"], second["answer"], third["answer"]) == ("7", "Wikipedia", "7")
    assert [s["skill"] for s in second["steps"]] == ["barcode-reading"]
    assert [e["answer"] for e in third["episodes"]] == ["7", "Wikipedia", "7"]
    assert third["messages"][-1]["type"] == "ai" and third["messages"][-1]["content"] == "7"


def test_every_graph_publishes_its_input_output_and_context_schemas(server_url):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server_url)
    for graph_id in ("maestro", "maestro-agent"):
        assistant = client.assistants.search(graph_id=graph_id)[0]
        schemas = client.assistants.get_schemas(assistant["assistant_id"])
        for key in ("input_schema", "output_schema", "state_schema", "context_schema"):
            assert schemas[key], f"{graph_id}: {key} is empty"
        assert {"question", "images", "choices"} <= set(schemas["input_schema"]["properties"])
        assert {"answer", "steps", "stop_reason"} <= set(schemas["output_schema"]["properties"])
        assert not {"answer", "steps", "stop_reason", "report"} & set(schemas["input_schema"]["properties"]), \
            f"{graph_id}: the input schema lists output fields"
    maestro = client.assistants.get_schemas(client.assistants.search(graph_id="maestro")[0]["assistant_id"])
    assert {"max_turns", "max_cost", "policy"} <= set(maestro["context_schema"]["properties"])
    assert maestro["context_schema"]["properties"]["max_turns"]["maximum"] == MAX_TURNS
    assert "episodes" in maestro["output_schema"]["properties"]


def test_input_errors_reach_the_caller_as_typed_events(server_url):
    from langgraph_sdk import get_client

    async def go():
        client = get_client(url=server_url)
        return [c async for c in client.runs.stream(
            None, "maestro", input={"question": "What does the QR code say?", "images": ["/etc/passwd"]},
            stream_mode=["custom", "values"])]

    chunks = asyncio.run(go())
    errors = [c.data for c in chunks if c.event == "custom" and c.data["event"] == "error"]
    assert errors and errors[0]["kind"] == "input" and "local file paths are not accepted" in errors[0]["message"]


@pytest.mark.parametrize("payload, context, reason", [
    ({}, {"max_turns": "lots"}, "max_turns: Input should be a valid integer"),
    ({}, {"policy": 123}, "policy: Input should be a valid string (got 123)"),
    ({}, {"max_turns": 10**9}, f"max_turns: Input should be less than or equal to {MAX_TURNS}"),
    ({}, {"seed": -1, "greedy": False}, "seed: Input should be greater than or equal to 0"),
    ({"question": "", "images": []}, {}, EMPTY_QUESTION),
    ({"question": " \n\t\u200b\u2060\u3164\u200d\u180e", "images": []}, {}, EMPTY_QUESTION),
], ids=["max_turns-text", "policy-number", "max_turns-unbounded", "seed-negative", "empty-question",
        "blank-question"])
def test_bad_contexts_and_blank_questions_end_with_the_typed_input_error(server_url, payload, context, reason):
    """A run context of the wrong type or out of bounds, and a blank question (spaces and
    invisible characters) with no image to read it from, end the run with the typed input error (an `error` event of
    kind `input`, then `input error: <why>`, no expert called) instead of a TypeError or an answer made up from
    nothing."""
    from langgraph_sdk import get_client

    run_input = {"question": "What text does the QR code encode?", "images": [data_url(ROOT / "examples/qrcode.png")],
                 **payload}

    async def go():
        client = get_client(url=server_url)
        return [c async for c in client.runs.stream(None, "maestro", input=run_input, context=context,
                                                    stream_mode=["custom", "values"])]

    chunks = asyncio.run(go())
    assert not [c for c in chunks if c.event == "error"], chunks  # the run itself did not fail
    errors = [c.data for c in chunks if c.event == "custom" and c.data["event"] == "error"]
    assert errors and errors[0]["kind"] == "input" and reason in errors[0]["message"]
    final = [c.data for c in chunks if c.event == "values"][-1]
    assert final["answer"] is None and final["stop_reason"].startswith("input error: ") and not final["steps"]


BAD_COMMANDS = {
    "stop": ({"goto": "answer", "update": {"stop": "bogus"}}, "state.stop: Input should be 'policy'"),
    "call": ({"goto": {"node": "barcode-reading", "input": "x"}}, "call: Input should be a valid dictionary (got 'x')"),
    "steps": ({"goto": "router", "update": {"steps": [{"junk": 1}]}}, "state.steps.1.model: Field required"),
}


@pytest.mark.parametrize("name", list(BAD_COMMANDS))
def test_a_command_that_writes_bad_state_ends_with_the_typed_input_error(server_url, name):
    """A `Command` on an answered thread that writes a wrong value into a field a node reads and
    jumps to that node ended the run with an untyped `__error__` (ValueError, AttributeError, ValidationError,
    TypeError); it ends with the typed input error naming the field, and the thread answers the next question. A
    skill node is sent its call (`Send`): a wrong call sent to it is named the same way."""
    from langgraph_sdk import get_client

    command, reason = BAD_COMMANDS[name]
    qr = {"question": "What text does the QR code encode?", "images": [data_url(ROOT / "examples/qrcode.png")]}

    async def go():
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread, "maestro", input=qr, context={"policy": "rules"})
        chunks = [c async for c in client.runs.stream(thread, "maestro", command=command, context={"policy": "rules"},
                                                      stream_mode=["custom", "values"])]
        after = await client.runs.wait(thread, "maestro", input=qr, context={"policy": "rules"})
        return chunks, after

    chunks, after = asyncio.run(go())
    assert not [c for c in chunks if c.event == "error"], chunks  # the run itself did not fail
    errors = [c.data for c in chunks if c.event == "custom" and c.data["event"] == "error"]
    assert errors and errors[0]["kind"] == "input" and reason in errors[0]["message"], errors
    final = [c.data for c in chunks if c.event == "values"][-1]
    assert final["answer"] is None and final["stop_reason"] == f"input error: {errors[0]['message']}"
    assert final["steps"] == [] and after["answer"] == "Wikipedia"


def test_the_server_log_has_no_unregistered_type_warning(server_url, server_folder):
    """The Agent Server's checkpointer (which `langgraph.json` cannot give a msgpack allow-list)
    warned "Deserializing unregistered type maestro_graph.types.StopReason ... will be blocked in a future version"
    on reading a thread back; the state holds plain JSON values, so a thread survives the block."""
    from langgraph_sdk import get_client

    async def go():
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        for images in (["/etc/passwd"], [data_url(ROOT / "examples/qrcode.png")]):  # an input error, then a step
            await client.runs.wait(thread, "maestro", context={"policy": "rules"},
                                   input={"question": "What does the QR code say?", "images": images})
        return (await client.threads.get_state(thread))["values"]

    values = asyncio.run(go())
    assert [e["stop_reason"] for e in values["episodes"]][0].startswith("input error")
    assert values["answer"] == "Wikipedia" and values["stop"] == "policy"
    log = (server_folder / "server.log").read_text()
    assert "Deserializing unregistered type" not in log and "maestro_graph.types" not in log


def test_an_integer_of_4301_digits_in_a_run_is_refused_without_a_server_error(server_url):
    """On the Agent Server: its JSON reader (orjson) refuses an integer it cannot hold, so the run
    is refused with a client error, not a 500, and the server keeps answering."""
    import httpx

    body = f'{{"assistant_id": "maestro", "input": {{"question": "q", "images": []}}, "context": {{"max_turns": ' \
           f'{"9" * 4301}}}}}'
    reply = httpx.post(f"{server_url}/runs/wait", content=body.encode(), timeout=60,
                       headers={"Content-Type": "application/json"})
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text[:300])
    assert httpx.get(f"{server_url}/ok", timeout=30).status_code == 200


def test_a_follow_up_is_about_the_threads_image_even_when_it_sends_an_empty_list(server_url):
    """On the Agent Server: `images: []` (what a client that always sends the key sends) does
    not erase the thread's image; a chat run's earlier human message holds the conversation's image; with no image
    anywhere the run ends with the typed input error."""
    from langgraph_sdk import get_client

    circles = data_url(ROOT / "examples/circles.png")

    async def go():
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        context = {"policy": "neural"}
        await client.runs.wait(thread, "maestro", input={"question": "How many circles are in the image?",
                                                        "images": [circles]}, context=context)
        follow_up = await client.runs.wait(thread, "maestro", input={"question": "Are there more than 5 circles?",
                                                                     "images": []}, context=context)
        chat = {"messages": [
            {"role": "human", "content": [{"type": "text", "text": "How many circles are in the image?"},
                                          {"type": "image_url", "image_url": {"url": circles}}]},
            {"role": "ai", "content": "7"},
            {"role": "human", "content": "Do any two of the circles touch?"}]}
        chatted = await client.runs.wait(None, "maestro", input=chat, context=context)
        alone = await client.runs.wait(None, "maestro", input={"question": "Are there more than 5 circles?"},
                                       context=context)
        return follow_up, chatted, alone

    follow_up, chatted, alone = asyncio.run(go())
    assert follow_up["answer"] == "Yes" and [s["skill"] for s in follow_up["steps"]] == ["counting"]
    assert chatted["answer"] == "Yes" and chatted["messages"][-1]["content"] == "Yes"
    assert alone["answer"] is None and alone["stop_reason"].startswith("input error: no image")


def test_the_messages_stream_mode_sends_the_answer_with_its_source_and_confidence(server_url):
    """The SDK's `messages` stream mode sent nothing but the run's metadata for a `question` input, and an AI message
    without confidence for a chat one: both now stream the answer as an AI message whose `response_metadata`
    carries `answer_source`, `confidence` and `stop`, the same as the run's values."""
    from langgraph_sdk import get_client

    circles = data_url(ROOT / "examples/circles.png")
    question = "How many circles are in the image?"
    inputs = {"question": {"question": question, "images": [circles]},
              "chat": {"messages": [{"role": "human", "content": [
                  {"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": circles}}]}]}}

    async def go(payload: dict) -> tuple[list[dict], dict]:
        client = get_client(url=server_url)
        thread = (await client.threads.create())["thread_id"]
        events = [chunk async for chunk in client.runs.stream(thread, "maestro", input=payload, stream_mode="messages",
                                                              context={"policy": "rules"})]
        said = [m for e in events if e.event.startswith("messages/") and isinstance(e.data, list) for m in e.data
                if isinstance(m, dict) and m.get("type") in ("ai", "AIMessageChunk")]
        return said, (await client.threads.get_state(thread))["values"]

    for kind, payload in inputs.items():
        said, values = asyncio.run(go(payload))
        assert said, f"{kind}: no AI message in the messages stream"
        meta = said[-1]["response_metadata"]
        assert said[-1]["content"] == values["answer"] == "7", kind
        assert (meta["answer_source"], meta["confidence"], meta["stop"]) == (
            values["answer_source"], values["confidence"], "policy"), kind
        assert 0 < meta["confidence"] < 1
