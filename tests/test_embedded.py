"""Maestro embedded in a larger agent graph: as a local subgraph node, as a RemoteGraph against `langgraph dev`,
and as a LangChain tool run by a ToolNode."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from maestro_graph.graph import MaestroContext, build_graph
from maestro_graph.image_sources import ImageSources
from servers import EXAMPLES, ROOT, data_url, free_port, server_env, wait_until_up

QR = str(EXAMPLES / "qrcode.png")
QR_URL = data_url(EXAMPLES / "qrcode.png")
REQUEST = "I scanned the label on a parcel. What text does the QR code encode?"


def _embedded():
    """graphs/embedded.py, loaded from its file the way langgraph.json names it."""
    spec = importlib.util.spec_from_file_location("maestro_embedded_example", ROOT / "graphs" / "embedded.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its type hints are resolved through sys.modules
    spec.loader.exec_module(module)
    return module


embedded = _embedded()


def test_agent_passes_state_into_maestro_and_reads_its_answer(registry):
    agent = embedded.build_agent(build_graph(registry))
    out = agent.invoke({"request": REQUEST, "images": [QR]}, context=MaestroContext(max_turns=3))
    assert out["question"] == "What text does the QR code encode?"  # written by the agent's own `plan` node
    assert out["answer"] == "Wikipedia"  # written by the Maestro subgraph
    assert out["steps"][0]["model"] == "zxing"
    assert out["report"].startswith("Answer: Wikipedia (via zxing@@barcode-reading")  # the agent's `report` node


def test_agent_without_images_skips_maestro(registry):
    out = embedded.build_agent(build_graph(registry)).invoke({"request": "What is the capital of France?"})
    assert "answer" not in out and out["report"].startswith("No image")


def test_maestro_as_a_tool_with_a_typed_schema(registry):
    tool = embedded.maestro_tool(build_graph(registry), image_sources=ImageSources(allowed_dirs=(EXAMPLES,)))
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
    assert isinstance(replies[0], ToolMessage) and replies[0].content == "Wikipedia"
    assert replies[1].status == "error" and "images" in replies[1].content  # the schema refuses a bad call


def test_the_tool_reads_no_file_the_operator_did_not_allow(registry, tmp_path):
    """The tool's arguments come from a model: by default only data URLs, and a refusal is the tool's error."""
    secret = tmp_path / "secret.png"
    secret.write_bytes((EXAMPLES / "qrcode.png").read_bytes())
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([embedded.maestro_tool(build_graph(registry))]))
    builder.add_edge(START, "tools")
    calls = [{"name": "ask_maestro", "id": f"call-{i}", "args": {"question": "What does the QR code say?",
                                                                  "images": [image]}}
             for i, image in enumerate([str(secret), "/etc/passwd", f"file://{secret}", QR_URL])]
    replies = builder.compile().invoke({"messages": [AIMessage(content="", tool_calls=calls)]})["messages"][1:]
    for reply in replies[:3]:
        assert reply.status == "error" and "local file paths are not accepted" in reply.content
        assert "Wikipedia" not in reply.content
    assert replies[3].status == "success" and replies[3].content == "Wikipedia"


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("lg") / "server.log"
    langgraph = str(Path(sys.executable).parent / "langgraph")
    with log.open("w") as fh:
        proc = subprocess.Popen([langgraph, "dev", "--no-browser", "--no-reload", "--port", str(port),
                                 "--host", "127.0.0.1"], cwd=ROOT, env=server_env(), stdout=fh,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/ok", proc=proc, log=log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
