"""Maestro inside a larger agent: three ways to embed it (`graphs/agent.py` serves the agent as
`maestro-agent`). Importing this module builds nothing.

1. As a subgraph node. The agent's state shares Maestro's keys (`question`, `images`, `choices` in; `answer`,
   `steps`, `stop_reason` out), so the compiled Maestro graph is added as a node as it is: LangGraph passes the
   shared keys in and merges Maestro's output back. The agent's own nodes read and write its own keys (`request`,
   `report`). The agent has its own run context (`AgentContext`); Maestro reads only its namespace, the `maestro`
   field (`MaestroContext.of`), so any parent context works: one without that field gives Maestro its defaults.
2. The same agent over the network: `remote_agent(url)` puts a `RemoteGraph` of a running Agent Server's `maestro`
   graph where the local subgraph was.
3. As a LangChain tool: `maestro_tool(maestro)` is a `StructuredTool` with a typed schema (question, images,
   choices) that a tool-calling model can pick; a `ToolNode` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException
from langgraph.graph import END, START, StateGraph
from langgraph.pregel.remote import RemoteGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # JSON schemas for Studio on Python < 3.12

from ...core.configs import DEFAULT_MAX_TURNS
from ...episode.confidence import answer_note
from ...episode.context import MaestroContext
from ...episode.endings import stop_update
from ...episode.state import AnswerSource, StepRecord
from ...errors import ConfigError
from ...images.sources import ImageRefused, ImageSources
from ...types import StopReason

__all__ = ["AgentContext", "AgentInput", "AgentOutput", "AgentState", "AskMaestro", "build_agent", "remote_agent",
           "remote_maestro", "maestro_tool"]


class AgentInput(TypedDict, total=False):
    """What a run of the agent sends: a task in the user's words (`request`) or Maestro's `question` itself, with
    the images and, for a multiple-choice question, its options."""

    request: str
    """The agent's own input: a task in the user's words."""
    images: list[str]
    question: str
    choices: list[str] | None


class AgentOutput(TypedDict, total=False):
    """What a run of the agent returns: its report, the question it put to Maestro, and Maestro's answer, steps and
    stop reason behind it."""

    report: str
    """The agent's own output, written after Maestro has answered (or been skipped)."""
    question: str
    answer: str | None
    answer_source: AnswerSource | None
    """Who gave the answer: Maestro's policy, an expert's candidate the graph chose, or the graph's marked guess
    (no expert answered): an agent can tell "the chart says no" from "nobody could read the chart"."""
    confidence: float | None
    """The probability that the answer is right (calibrated: docs/evaluation.md, "How sure an answer is")."""
    steps: list[StepRecord]
    """The steps of Maestro's last episode (the subgraph writes them whole, so a thread's next run replaces them)."""
    stop_reason: str


class AgentState(AgentInput, AgentOutput, total=False):
    """Everything the agent's nodes share: its input and output keys (Maestro's among them)."""


@dataclass
class AgentContext:
    """The agent's own run context: its settings, and Maestro's under the `maestro` namespace."""

    show_trace: bool = True
    """Whether the report names the expert pairs Maestro used (the agent's own setting)."""
    maestro: MaestroContext = field(default_factory=MaestroContext)
    """What Maestro reads (budget, policy); on the Agent Server a run sends it as `{"maestro": {"max_turns": 3}}`."""


def plan(state: AgentState) -> dict[str, Any]:
    """The agent's first node: turn its task into Maestro's question (the task's last sentence that asks)."""
    request = (state.get("request") or state.get("question") or "").strip()
    sentences = [s.strip() for s in request.replace("\n", " ").split(". ") if s.strip()]
    asking = [s for s in sentences if s.endswith("?")]
    return {"question": (asking or sentences or [""])[-1]}


def route(state: AgentState) -> Literal["maestro", "report"]:
    """Without an image there is nothing for Maestro to look at: the agent answers that itself."""
    return "maestro" if state.get("images") else "report"


def report(state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """The agent's last node: a sentence built from Maestro's answer and trace."""
    if not state.get("images"):
        return {"report": "No image was given, so there is nothing to look at."}
    pairs = [f"{s['model']}@@{s['skill']}" for s in state.get("steps", [])]
    answer = state.get("answer")
    cost = sum(s.get("cost", 0.0) for s in state.get("steps", []))
    if (runtime.context or AgentContext()).show_trace:
        used = f"via {', '.join(pairs)}" if pairs else "without calling an expert"
    else:
        used = "trace hidden"
    head = f"Answer: {answer}" if answer is not None else "Maestro found no answer"
    note = answer_note(state.get("answer_source"), state.get("confidence"), asked=bool(state.get("steps")))
    return {"report": f"{head} ({'; '.join(filter(None, (used, note)))}; cost {cost:.2f}; "
                      f"stop: {state.get('stop_reason', '')})."}


def build_agent(maestro: Any, *, checkpointer: Any = None) -> Any:
    """The agent graph with `maestro` (a compiled Maestro graph or a RemoteGraph of one) as its `maestro` node."""
    builder = StateGraph(AgentState, context_schema=AgentContext, input_schema=AgentInput, output_schema=AgentOutput)
    builder.add_node("plan", plan)
    builder.add_node("maestro", maestro)
    builder.add_node("report", report)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", route)
    builder.add_edge("maestro", "report")
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer, name="maestro-agent")


def remote_agent(url: str, *, api_key: str | None = None, assistant: str = "maestro") -> Any:
    """The same agent, its Maestro node served by an Agent Server (`langgraph dev` / `langgraph up`) at `url`. The
    run's Maestro settings travel with each remote run (`remote_maestro`), as a local subgraph reads them."""
    return build_agent(remote_maestro(RemoteGraph(assistant, url=url, api_key=api_key)))


def remote_maestro(remote: RemoteGraph) -> Any:
    """A node that runs `remote` with the run's Maestro settings as the remote run's context: a RemoteGraph added
    as a node sends no context (LangGraph passes a node its config, and the parent's context is not part of what a
    RemoteGraph sends), so `min_confidence`, `max_turns` and the rest would silently take the server's defaults.
    The settings are read as a local subgraph reads them (`MaestroContext.of`: the `maestro` namespace of any
    parent context); a wrong one ends the run with the input error, as it does locally. The remote run gets
    Maestro's input only (`question`, `images`, `choices`), not the agent's own keys, which its graph refuses."""

    def maestro(state: AgentState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        try:
            settings = MaestroContext.of(runtime.context)
        except ConfigError as exc:
            return {"answer": None, "answer_source": None, "confidence": None, "steps": [],
                    **stop_update(StopReason.INPUT_ERROR, exc)}
        fields: Mapping[str, Any] = state  # read by the names of Maestro's input fields
        sent = {key: fields[key] for key in AgentInput.__annotations__ if key in fields and key != "request"}
        return remote.invoke(sent, config, context=asdict(settings))

    return maestro


class AskMaestro(BaseModel):
    """Arguments of the Maestro tool, as a tool-calling model sees them."""

    question: str = Field(description="a short question about the images, e.g. 'How many circles are there?'")
    images: list[str] = Field(min_length=1, description="the images: data:image/...;base64 URLs (file paths only "
                              "inside the directories the operator allows)")
    choices: list[str] | None = Field(None, description="the options of a multiple-choice question, if any")


def maestro_tool(maestro: Any, *, max_turns: int = DEFAULT_MAX_TURNS, min_confidence: float = 0.0,
                 image_sources: ImageSources | None = None) -> StructuredTool:
    """Maestro as a tool: it answers a question about images by orchestrating expert models. The arguments come
    from a model, so they are untrusted: images pass `image_sources` (default: the operator's environment,
    `MAESTRO_IMAGE_DIRS`/`MAESTRO_IMAGE_HOSTS`, data URLs only when unset), and a refusal or a run without an
    answer comes back as the tool's error message, so the calling model learns why. The reply says how the answer
    came about and how sure it is ("no (guess: no expert answered in the form the question asks for; confidence
    0.52)"); an answer less sure than `min_confidence` is an error ("Maestro could not find out"), so the calling
    agent escalates instead of trusting it."""
    sources = image_sources or ImageSources.from_env()

    def ask_maestro(question: str, images: list[str], choices: list[str] | None = None) -> str:
        try:
            resolved = sources.resolve(images)
        except ImageRefused as exc:
            raise ToolException(str(exc)) from exc
        out = maestro.invoke({"question": question, "images": resolved, "choices": choices},
                             context=MaestroContext(max_turns=max_turns, min_confidence=min_confidence))
        if out.get("stop") == StopReason.INPUT_ERROR:  # the graph's intake refused the arguments: say which
            raise ToolException(f"Maestro refused the request: {out.get('stop_detail')}")
        if out.get("stop") == StopReason.LOW_CONFIDENCE:
            raise ToolException(f"Maestro could not find out ({out.get('stop_reason')})")
        if out.get("answer") is None:
            raise ToolException(f"Maestro found no answer (stop: {out.get('stop_reason')})")
        note = answer_note(out.get("answer_source"), out.get("confidence"), asked=bool(out.get("steps")))
        return f"{out['answer']} ({note})" if note else out["answer"]

    return StructuredTool.from_function(
        ask_maestro, name="ask_maestro", args_schema=AskMaestro, handle_tool_error=True,
        description="Answer a question about one or more images (counting, reading text, charts, tables, "
        "barcodes, geometry) by orchestrating local expert models. Returns a short answer, then in brackets "
        "whether it is a guess and the probability that it is right.",
    )
