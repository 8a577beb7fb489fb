"""The trust suite's check of the Agent Server graph's run input: every input field and every
`Command` update written with a wrong type is a typed input error, and a `Command` naming what the graph lacks (a
node, a channel, a resume) is refused instead of answering with the previous run's answer. The values and the rule
that judges a run are the ones tests/test_agent_server_input.py sends through `langgraph_sdk` to a real `langgraph
dev`; here they go to the same compiled graph in this process, through the same `stream` the server calls."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Send

from ...episode.graph import build_graph
from ...episode.run_input import BadRunInput
from ...images.sources import ImageSources
from ...registry import Registry
from .target import QUESTION, Target, TrustCase

__all__ = ["WRONG_INPUT", "COMMAND_REFUSALS", "REFUSED", "typed_input_error", "as_command", "agent_server_input"]

WRONG_INPUT: dict[str, list[Any]] = {
    "question": [5, True, ["x"], {"text": "x"}],
    "images": [5, True, "data:image/png;base64,AAAA", [5], {"url": "x"}],
    "choices": [5, True, "A or B", [1, 2]],
    "history": [5, True, ["x"], [{"question": 5, "answer": "x"}]],
    "messages": [5, True, [5], [{"role": "nobody", "content": "x"}], [{"role": "human", "content": 5}]],
}
"""For each field of the graph's input, values of the wrong type (or of the right container with wrong items)."""
COMMAND_REFUSALS: dict[str, tuple[dict, str]] = {
    "goto": ({"goto": "nowhere"}, "command.goto: the graph has no node 'nowhere'; its nodes are answer, "),
    "send": ({"goto": {"node": "nowhere", "input": {}}}, "command.goto: the graph has no node 'nowhere'"),
    "channel": ({"update": {"bogus": 1}, "goto": "router"}, "command.update.bogus: the graph has no such field; it "
                "takes "),
    "resume": ({"resume": "junk"}, "command.resume: this graph never waits to be resumed (it does not interrupt)"),
    "list": ({"goto": "answer", "update": {"steps": "x"}}, "command.update.steps: expected a list, whose items are "
             "appended"),
}
"""A `Command` (as the SDK sends it, JSON) naming what the graph lacks, and the start of its refusal."""
REFUSED = "BadRunInput"
"""The error a run gets when its input cannot even be stored (messages that are not messages, no such field)."""


def typed_input_error(events: list[tuple[str, Any]]) -> tuple[bool, str]:
    """How a run's stream ((mode or event, data) pairs: the SDK's `event`/`data`, LangGraph's stream modes
    "custom" and "values", and ("error", {"error": type, "message": ...}) for a run that raised) said what was
    wrong with its input: (whether it said so as a typed input error, what it said). Typed: the refusal
    `BadRunInput: <why>` with no state written, or the run ended on the input error before any step."""
    failures = [data for event, data in events if event == "error"]
    if failures:
        refused = (len(failures) == 1 and failures[0].get("error") == REFUSED
                   and not any(event == "values" for event, _ in events))
        return refused, f"{failures[0].get('error')}: {failures[0].get('message')}"
    errors = [data for event, data in events if event == "custom" and data.get("event") == "error"]
    final = ([data for event, data in events if event == "values"] or [{}])[-1]
    typed = (bool(errors) and errors[0].get("kind") == "input" and final.get("answer") is None
             and final.get("steps") == [] and str(final.get("stop_reason", "")).startswith("input error: "))
    return typed, errors[0]["message"] if errors else f"no input error; the run ended {final.get('stop_reason')!r}"


def as_command(sent: dict) -> Command:
    """The `Command` the Agent Server makes of a JSON command (a `goto` with a node and an input is a `Send`)."""
    goto = sent.get("goto", ())
    if isinstance(goto, dict):
        goto = Send(goto["node"], goto["input"])
    return Command(update=sent.get("update"), goto=goto, resume=sent.get("resume"))


def _stream(graph, thread: str, run_input: Any) -> list[tuple[str, Any]]:
    config = {"configurable": {"thread_id": thread}}
    try:
        return list(graph.stream(run_input, config, stream_mode=["custom", "values"]))
    except BadRunInput as exc:
        return [("error", {"error": REFUSED, "message": str(exc)})]


def agent_server_input(t: Target) -> TrustCase:
    """Each WRONG_INPUT value as a run's input and (the first three) as a `Command` update on an answered thread,
    and each of COMMAND_REFUSALS, through the Agent Server graph: all typed; the thread answers again after each."""
    graph = build_graph(Registry.load(t.registry_file), checkpointer=InMemorySaver(),
                        image_sources=ImageSources.from_env({}))
    good = {"question": QUESTION, "images": [t.image]}
    untyped, runs = [], 0
    for field, values in WRONG_INPUT.items():
        for value in values:
            typed, said = typed_input_error(_stream(graph, str(uuid.uuid4()), {**good, field: value}))
            untyped += [] if typed and field in said else [f"input.{field} = {value!r}: {said[:100]}"]
            runs += 1
    thread = str(uuid.uuid4())
    commands = [({"update": {field: value}, "goto": "router"}, field)
                for field, values in WRONG_INPUT.items() for value in values[:3]]
    commands += [(command, refusal) for command, refusal in COMMAND_REFUSALS.values()]
    answers = [graph.invoke(good, {"configurable": {"thread_id": thread}})["answer"]]
    for command, expected in commands:
        typed, said = typed_input_error(_stream(graph, thread, as_command(command)))
        untyped += [] if typed and expected in said else [f"command {command}: {said[:100]}"]
        answers.append(graph.invoke(good, {"configurable": {"thread_id": thread}})["answer"])
    ok = not untyped and set(answers) == {"Wikipedia"}
    return TrustCase("Agent Server runs whose input fields and Command updates have the wrong type, and Commands "
                     "naming no node, no channel or a resume", "every one a typed input error or refusal; the "
                     "thread answers after each", ok, "; ".join(untyped[:4]) or
                     f"{runs} inputs and {len(commands)} commands typed, answers {sorted(set(answers))}")
