"""Maestro embedded in a larger agent graph (`maestro_graph.doors.agents`, importable from the installed package): as a
local subgraph node, as a RemoteGraph against `langgraph dev`, and as a LangChain tool run by a ToolNode; and a
parent with its own context schema running Maestro both ways."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass, field
from typing import Annotated

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from PIL import Image
from servers import EXAMPLES, data_url, langgraph_dev
from typing_extensions import TypedDict

import maestro_graph.doors.agents as embedded
from maestro_graph.core.question_text import EMPTY_QUESTION
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.images.sources import ImageSources
from maestro_graph.policy import make_policy

QR = str(EXAMPLES / "qrcode.png")
QR_URL = data_url(EXAMPLES / "qrcode.png")
REQUEST = "I scanned the label on a parcel. What text does the QR code encode?"


def test_agent_passes_state_into_maestro_and_reads_its_answer(registry):
    agent = embedded.build_agent(build_graph(registry, make_policy("rules")))
    out = agent.invoke({"request": REQUEST, "images": [QR]},
                       context=embedded.AgentContext(maestro=MaestroContext(max_turns=3)))
    assert out["question"] == "What text does the QR code encode?"  # written by the agent's own `plan` node
    assert out["answer"] == "Wikipedia"  # written by the Maestro subgraph
    assert out["steps"][0]["model"] == "zxing"
    assert re.match(r"Answer: Wikipedia \(via zxing@@barcode-reading; confidence (0\.\d\d|1\.00);", out["report"])
    assert out["answer_source"] == "policy" and 0 < out["confidence"] < 1  # Maestro's, in AgentOutput


def test_a_second_run_on_the_agents_thread_reports_its_own_steps(registry):
    """The agent's `steps` added each run's to the thread's earlier ones: the second report named two calls and
    twice the cost for one."""
    agent = embedded.build_agent(build_graph(registry, make_policy("rules")), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "parcel"}}
    reports = []
    for _ in range(2):
        out = agent.invoke({"request": REQUEST, "images": [QR]}, config,
                           context=embedded.AgentContext(maestro=MaestroContext(max_turns=3)))
        assert [s["model"] for s in out["steps"]] == ["zxing"]
        reports.append(out["report"])
    assert reports[1] == reports[0] and "cost 0.05" in reports[1]


@dataclass
class ForeignContext:
    """A parent graph's own context that knows nothing of Maestro."""

    user_id: str = "u-1"


@dataclass
class ScopedContext:
    """A parent's own context with Maestro's settings in the documented `maestro` namespace."""

    user_id: str = "u-1"
    maestro: dict = field(default_factory=dict)


class ParentState(TypedDict, total=False):
    question: str
    images: list[str]
    answer: str | None
    stop_reason: str
    messages: Annotated[list[AnyMessage], add_messages]


def test_any_parent_context_runs_maestro_as_a_subgraph_and_as_a_tool(registry):
    """A crash this guards against: a parent with its own context schema ran Maestro into `'MyCtx' object has no
    attribute 'max_turns'`. Maestro reads only what it knows (defaults otherwise), both as a node and as a tool;
    a wrong-typed field in its namespace ends the run with an input error that names it."""
    maestro = build_graph(registry, make_policy("rules"))
    builder = StateGraph(ParentState, context_schema=ForeignContext)
    builder.add_node("maestro", maestro)
    builder.add_edge(START, "maestro")
    parent = builder.compile()
    out = parent.invoke({"question": "What text does the QR code encode?", "images": [QR]}, context=ForeignContext())
    assert out["answer"] == "Wikipedia"
    bad = parent.invoke({"question": "What text does the QR code encode?", "images": [QR]},
                        context=ScopedContext(maestro={"max_turns": "many"}))
    assert bad["answer"] is None and bad["stop_reason"].startswith("input error: field 'context': max_turns")
    assert "errors.pydantic.dev" not in bad["stop_reason"]

    tool = embedded.maestro_tool(maestro, image_sources=ImageSources(allowed_dirs=(EXAMPLES,)))
    tools = StateGraph(ParentState, context_schema=ForeignContext)
    tools.add_node("tools", ToolNode([tool]))
    tools.add_edge(START, "tools")
    call = AIMessage(content="", tool_calls=[{"name": "ask_maestro", "id": "c1",
                                              "args": {"question": "What does the QR code say?", "images": [QR]}}])
    reply = tools.compile().invoke({"messages": [call]}, context=ForeignContext())["messages"][-1]
    assert re.fullmatch(r"Wikipedia \(confidence (0\.\d\d|1\.00)\)", reply.content)


def test_agent_without_images_skips_maestro(registry):
    agent = embedded.build_agent(build_graph(registry, make_policy("rules")))
    out = agent.invoke({"request": "What is the capital of France?"})
    assert "answer" not in out and out["report"].startswith("No image")


def test_maestro_as_a_tool_with_a_typed_schema(registry):
    tool = embedded.maestro_tool(build_graph(registry, make_policy("rules")),
                                 image_sources=ImageSources(allowed_dirs=(EXAMPLES,)))
    schema = convert_to_openai_tool(tool)["function"]
    assert schema["name"] == "ask_maestro"
    assert schema["parameters"]["required"] == ["question", "images"]
    assert schema["parameters"]["properties"]["images"]["type"] == "array"

    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "tools")
    agent_turn = AIMessage(content="", tool_calls=[
        {"name": "ask_maestro", "id": "call-1", "args": {"question": "What does the QR code say?", "images": [QR]}},
        {"name": "ask_maestro", "id": "call-2", "args": {"question": "What does the QR code say?"}},
    ])
    replies = builder.compile().invoke({"messages": [agent_turn]})["messages"][1:]
    assert isinstance(replies[0], ToolMessage)
    assert re.fullmatch(r"Wikipedia \(confidence (0\.\d\d|1\.00)\)", replies[0].content)
    assert replies[1].status == "error" and "images" in replies[1].content  # the schema refuses a bad call


def test_the_tool_reads_no_file_the_operator_did_not_allow(registry, tmp_path):
    """The tool's arguments come from a model: by default only data URLs, and a refusal is the tool's error."""
    secret = tmp_path / "secret.png"
    secret.write_bytes((EXAMPLES / "qrcode.png").read_bytes())
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([embedded.maestro_tool(build_graph(registry, make_policy("rules")))]))
    builder.add_edge(START, "tools")
    calls = [{"name": "ask_maestro", "id": f"call-{i}", "args": {"question": "What does the QR code say?",
                                                                  "images": [image]}}
             for i, image in enumerate([str(secret), "/etc/passwd", f"file://{secret}", QR_URL])]
    replies = builder.compile().invoke({"messages": [AIMessage(content="", tool_calls=calls)]})["messages"][1:]
    for reply in replies[:3]:
        assert reply.status == "error" and "local file paths are not accepted" in reply.content
        assert "Wikipedia" not in reply.content
    assert replies[3].status == "success" and replies[3].content.startswith("Wikipedia (")


def _blank_page() -> str:
    """A white PNG as a data URL: an image with no text to read a question from."""
    out = io.BytesIO()
    Image.new("RGB", (120, 80), "white").save(out, format="PNG")
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def test_a_blank_question_or_a_bad_context_is_refused_by_the_graph_and_the_tool(registry):
    """In-process: the graph's intake refuses a question of invisible
    characters without an image, and a run context whose fields are wrong (a MaestroContext built without
    validation, as the Agent Server builds it), with the typed input error before any expert runs; a blank question
    with an image is read from the image first, and refused when nothing can be read; the tool
    hands the reason back to the calling model."""
    graph = build_graph(registry, make_policy("rules"))
    blank = graph.invoke({"question": " \t\u200b\u2060\u3164\u200d\u180e", "images": []})
    assert blank["answer"] is None and blank["stop_reason"] == f"input error: {EMPTY_QUESTION}" and not blank["steps"]
    unread = graph.invoke({"question": "\u200b", "images": [_blank_page()]})
    assert unread["answer"] is None and unread["stop_reason"].startswith(f"input error: {EMPTY_QUESTION}; and no "
                                                                         "question could be read from the image")
    assert [s["skill"] for s in unread["steps"]] == ["ocr"]
    unchecked = graph.invoke({"question": "What does the QR code say?", "images": [QR_URL]},
                             context=MaestroContext(max_turns="lots"))  # type: ignore[arg-type]
    assert unchecked["stop_reason"].startswith("input error: field 'context': max_turns") and not unchecked["steps"]

    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([embedded.maestro_tool(graph)]))
    builder.add_edge(START, "tools")
    call = {"name": "ask_maestro", "id": "call-1", "args": {"question": "", "images": [_blank_page()]}}
    (reply,) = builder.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})["messages"][1:]
    assert reply.status == "error" and reply.content.startswith(f"Maestro refused the request: {EMPTY_QUESTION}")


CIRCLES = str(EXAMPLES / "circles.png")
GUESS = "Is the number of circles seven? Please answer yes or no."
"""Counting answers 7, no yes/no: the graph's answer is its marked prior guess."""
GUESS_NOTE = "guess: no expert answered in the form the question asks for; confidence"


def test_a_guess_reaches_the_agent_and_the_tool_marked_and_with_its_confidence(registry):
    """The agent's output and the tool's reply tell "the image says no" from "nobody could
    read it"; below `min_confidence` the graph withholds the answer (a parent can escalate) and the tool raises."""
    maestro = build_graph(registry, make_policy("fixed:opencv-vision@@counting"))
    out = embedded.build_agent(maestro).invoke({"question": GUESS, "images": [CIRCLES]})
    assert out["answer"] == "no" and out["answer_source"] == "guess" and 0 < out["confidence"] < 1
    assert f"{GUESS_NOTE} {out['confidence']:.2f}" in out["report"]
    withheld = embedded.build_agent(maestro).invoke(
        {"question": GUESS, "images": [CIRCLES]},
        context=embedded.AgentContext(maestro=MaestroContext(min_confidence=0.99)))
    assert withheld["answer"] is None and withheld["confidence"] == out["confidence"]
    assert withheld["stop_reason"] == (f"low confidence: the answer's confidence {out['confidence']:.2f} is below "
                                       "min_confidence 0.99")
    image = {"type": "image_url", "image_url": {"url": data_url(EXAMPLES / "circles.png")}}
    chat = maestro.invoke({"messages": [HumanMessage(content=[{"type": "text", "text": GUESS}, image])]},
                          context=MaestroContext(min_confidence=0.99))  # a chat run: the reply says so
    assert chat["messages"][-1].content == f"I could not find out ({withheld['stop_reason']})"

    sources = ImageSources(allowed_dirs=(EXAMPLES,))
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([embedded.maestro_tool(maestro, image_sources=sources)]))
    builder.add_edge(START, "tools")
    call = {"name": "ask_maestro", "id": "call-1", "args": {"question": GUESS, "images": [CIRCLES]}}
    (reply,) = builder.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})["messages"][1:]
    assert reply.status == "success" and reply.content == f"no ({GUESS_NOTE} {out['confidence']:.2f})"
    strict = StateGraph(MessagesState)
    strict.add_node("tools", ToolNode([embedded.maestro_tool(maestro, min_confidence=0.99, image_sources=sources)]))
    strict.add_edge(START, "tools")
    (refused,) = strict.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})["messages"][1:]
    assert refused.status == "error" and refused.content.startswith("Maestro could not find out (low confidence")
    assert "no (" not in refused.content


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory):
    with langgraph_dev(tmp_path_factory.mktemp("lg")) as url:
        yield url


@pytest.mark.slow
def test_remote_graph_agent_against_the_agent_server(agent_server):
    agent = embedded.remote_agent(agent_server)
    out = agent.invoke({"request": REQUEST, "images": [QR_URL]})
    assert out["answer"] == "Wikipedia" and out["report"].startswith("Answer: Wikipedia")


@pytest.mark.slow
def test_agent_server_serves_the_embedded_graph(agent_server):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=agent_server)
    assert client.assistants.search(graph_id="maestro-agent")
    values = client.runs.wait(None, "maestro-agent", input={"request": REQUEST, "images": [QR_URL]})
    assert values["answer"] == "Wikipedia"
    scoped = client.runs.wait(None, "maestro-agent", input={"request": REQUEST, "images": [QR_URL]},
                              context={"show_trace": False, "maestro": {"policy": "rules", "max_turns": 2}})
    assert scoped["answer"] == "Wikipedia" and "trace hidden" in scoped["report"]
    assert scoped["answer_source"] == "policy" and 0 < scoped["confidence"] < 1
    guessed = client.runs.wait(None, "maestro-agent", context={"maestro": {"policy": "rules"}},
                               input={"question": GUESS, "images": [data_url(EXAMPLES / "circles.png")]})
    assert guessed["answer"] == "no" and guessed["answer_source"] == "guess" and GUESS_NOTE in guessed["report"]
