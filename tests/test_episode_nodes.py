"""The graph's nodes called alone, as module-level functions of a state, a runtime and the graph's parts: the router's
decision from a given state and context, the skill node's run of the call it is sent, and what they write back
(plain JSON in the shape the state schema declares)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from langgraph.types import Command, Overwrite, Send
from pydantic import TypeAdapter

from maestro_graph.episode.confidence import shipped_confidence
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.parts import GraphParts
from maestro_graph.episode.router import router
from maestro_graph.episode.run_input import BadRunInput
from maestro_graph.episode.skill_node import run_skill
from maestro_graph.episode.state import ANSWER, ROUTER, DecisionRecord, SkillCall, StepRecord, appended
from maestro_graph.images.sources import ImageSources
from maestro_graph.policy import PolicyCatalog, make_policy
from maestro_graph.types import Decision, Step, StopReason

ROOT = Path(__file__).resolve().parents[1]
QRCODE = str(ROOT / "examples" / "qrcode.png")
QUESTION = "What text does the QR code encode?"


@pytest.fixture(scope="module")
def parts(registry):
    return GraphParts(registry=registry, policy=make_policy("rules"), policies=PolicyCatalog.open("rules"),
                      confidence=shipped_confidence())


def _runtime(events: list, **context) -> Runtime:
    return Runtime(context=MaestroContext(**context), stream_writer=events.append)


def _state(**fields) -> dict:
    return {"question": QUESTION, "images": [QRCODE], "choices": None, "history": [], "steps": [], "decisions": [],
            "stop": None, **fields}


def test_the_router_sends_the_policys_call_to_its_skill_node(parts):
    """A decision made from a state and a context, no graph run: the context's policy calls the pair, the call
    goes to its skill's node as a SkillCall of plain JSON, and the decision is recorded and streamed."""
    events: list = []
    command = router(_state(), _runtime(events, policy="fixed:zxing@@barcode-reading"), parts=parts)
    assert isinstance(command, Command) and isinstance(command.goto, Send)
    assert command.goto.node == "barcode-reading"
    assert command.goto.arg == SkillCall(model="zxing", input="", question=QUESTION, images=[QRCODE], choices=None,
                                         history=[])
    json.dumps(command.goto.arg)
    [decision] = command.update["decisions"]
    assert Decision.model_validate(decision).action().pair == "zxing@@barcode-reading"
    assert decision["policy"] == "fixed:zxing@@barcode-reading" and decision["log_prob"] == 0.0
    assert [e["event"] for e in events] == ["decision"] and events[0]["action"]["pair"] == "zxing@@barcode-reading"


def test_the_router_answers_from_the_steps_once_the_budget_is_spent(parts):
    """With the turns spent and one candidate, the graph answers it without asking the policy (forced, stop
    `budget`)."""
    step = StepRecord(**Step(model="zxing", skill="barcode-reading", answer="Wikipedia", confidence=0.9,
                             cost=0.1).model_dump(mode="json"))
    command = router(_state(steps=[step]), _runtime([], max_turns=1), parts=parts)
    assert command.goto == ANSWER
    assert command.update["answer"] == "Wikipedia" and command.update["stop"] == "budget"
    assert command.update["decisions"][0]["forced"] is True


def test_the_router_turns_a_wrong_pair_into_an_observation(parts):
    """A pair the registry does not have costs a turn: a `policy` step back to the router, no skill node runs."""
    command = router(_state(), _runtime([], policy="fixed:zxing@@counting"), parts=parts)
    assert command.goto == ROUTER
    [step] = command.update["steps"]
    assert step["error_kind"] == "policy" and "zxing@@counting is not a valid pair" in step["error"]


def test_the_router_ends_on_steps_a_command_wrote_wrong(parts):
    command = router(_state(steps=[{"junk": 1}]), _runtime([]), parts=parts)
    assert command.goto == ANSWER and command.update["stop"] == StopReason.INPUT_ERROR
    assert command.update["stop_detail"].startswith("state.steps.0.model: Field required")


def test_the_skill_node_runs_the_call_it_is_sent(parts):
    events: list = []
    call = SkillCall(model="zxing", input="", question=QUESTION, images=[QRCODE], choices=None, history=[])
    command = run_skill(call, _runtime(events), skill="barcode-reading", parts=parts)
    assert command.goto == ROUTER
    update = command.update
    [step] = update["steps"]
    assert step["answer"] == "Wikipedia" and step["model"] == "zxing" and step["error"] is None
    assert TypeAdapter(list[StepRecord]).validate_python(update["steps"]) == update["steps"]
    json.dumps(update)
    assert [e["event"] for e in events] == ["step"]


@pytest.mark.parametrize("sent, problem", [
    ("x", "call: Input should be a valid dictionary (got 'x')"),
    ({"model": "zxing", "input": "", "question": QUESTION, "images": "qr.png", "choices": None, "history": []},
     "call.images: Input should be a valid list (got 'qr.png')"),
    (_state(), "call.model: Field required"),  # reached by a Command without a Send: the node gets the state
], ids=["text", "images-text", "no-call"])
def test_the_skill_node_ends_the_episode_on_a_wrong_call(parts, sent, problem):
    command = run_skill(sent, _runtime([]), skill="barcode-reading", parts=parts)
    assert command.goto == ANSWER
    update = command.update
    assert update["stop"] == StopReason.INPUT_ERROR and update["stop_detail"].startswith(problem)
    assert update["answer"] is None and update["steps"].value == []


def test_a_command_that_jumps_to_a_skill_node_without_a_call_ends_with_the_input_error(registry):
    """The whole graph: a thread's next run jumps straight to a skill node (no `Send`, so no call); the answer node
    reports the input error with the episode emptied, and the thread answers its next question."""
    graph = build_graph(registry, make_policy("rules"), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "jump"}}
    asked = {"question": QUESTION, "images": [QRCODE]}
    assert graph.invoke(asked, config)["answer"] == "Wikipedia"
    out = graph.invoke(Command(goto="barcode-reading"), config)
    assert out["answer"] is None and out["steps"] == [] and out["decisions"] == []
    assert out["stop_reason"].startswith("input error: call.model: Field required")
    assert graph.invoke(asked, config)["answer"] == "Wikipedia"


def test_the_list_fields_refuse_a_write_that_is_not_a_list():
    """`steps`, `decisions` and `episodes` grow by lists: the reducer appends a list's items and refuses anything
    else with an error saying what to write, and a client's `Command` or state update that writes one is refused
    before the run, naming the field (an `Overwrite` of a list still replaces the field)."""
    assert appended([{"a": 1}], [{"b": 2}]) == [{"a": 1}, {"b": 2}]
    for wrong in ("x", {"junk": 1}, 5):
        with pytest.raises(TypeError, match=r"must be a list, to append its items.*write \[item\]"):
            appended([], wrong)


def test_a_command_writing_a_list_field_wrong_is_refused_before_the_run(registry):
    graph = build_graph(registry, make_policy("rules"), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "lists"}}
    asked = {"question": QUESTION, "images": [QRCODE]}
    assert graph.invoke(asked, config)["answer"] == "Wikipedia"
    with pytest.raises(BadRunInput, match=r"^command\.update\.steps: expected a list, whose items are appended"):
        graph.invoke(Command(goto=ANSWER, update={"steps": "x"}), config)
    with pytest.raises(BadRunInput, match=r"^update\.decisions: expected a list"):
        graph.update_state(config, {"decisions": {"__overwrite__": "x"}})
    graph.update_state(config, {"episodes": Overwrite([])})  # an Overwrite of a list is a list
    assert graph.get_state(config).values["episodes"] == []
    assert graph.invoke(asked, config)["answer"] == "Wikipedia"


def test_step_and_decision_records_are_the_json_form_of_their_types():
    """The state's records name the same fields as `types.Step` and `types.Decision`, so one converts to the other
    without loss (a field added to a type and not to its record fails here)."""
    assert set(StepRecord.__annotations__) == set(Step.model_fields)
    assert set(DecisionRecord.__annotations__) == set(Decision.model_fields)


def test_what_a_command_writes_past_intake_is_checked_where_it_enters(registry, tmp_path):
    """A served graph's client may write its own images (or question) into a thread's state and send a skill node a
    call on them, skipping intake: the compiled graph checks those writes as intake checks a run's, so the nodes
    after intake trust the state. A file outside the image directories ends the run on the input error with nothing
    read and the images unwritten; the same picture inside them is read, and the state holds its verified data URL;
    a copy of the graph (the Agent Server's, `with_config`) checks alike; a question intake would refuse ends the
    run the same way; a state update writing a refused image is refused."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = str(shutil.copy(QRCODE, allowed / "qr.png"))
    graph = build_graph(registry, make_policy("rules"), image_sources=ImageSources(allowed_dirs=(allowed,)),
                        checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "past-intake"}}
    assert graph.invoke({"question": QUESTION, "images": [inside]}, config)["answer"] == "Wikipedia"
    call = SkillCall(model="zxing", input="", question=QUESTION, images=[QRCODE], choices=None, history=[])
    for runs in (graph, graph.with_config(tags=["copy"])):
        out = runs.invoke(Command(goto=Send("barcode-reading", call), update={"images": [QRCODE]}), config)
        assert out["answer"] is None and out["stop_reason"].startswith("input error: image 0: local file paths")
        assert [s["answer"] for s in out["steps"]] == ["Wikipedia"]  # the earlier run's step; nothing read
        assert graph.get_state(config).values["images"] == []
    out = graph.invoke(Command(goto=Send("barcode-reading", {**call, "images": [inside]}), update={"images": [inside]}),
                       config)
    assert [s["answer"] for s in out["steps"]][:2] == ["Wikipedia", "Wikipedia"] and out["answer"] == "Wikipedia"
    assert graph.get_state(config).values["images"][0].startswith("data:image/png;base64,")
    out = graph.invoke(Command(goto="router", update={"question": "x" * 5000}), config)
    assert out["answer"] is None and out["stop_reason"].startswith("input error: the question has 5,000 characters")
    with pytest.raises(BadRunInput, match=r"^update: image 0: local file paths"):
        graph.update_state(config, {"images": [QRCODE]})
