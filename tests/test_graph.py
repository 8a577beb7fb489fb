"""The graph end to end with real experts: routing, streaming, budget, policy mistakes, faults and bad inputs."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import GraphRecursionError

from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy
from maestro_graph.policy.base import Distribution
from maestro_graph.registry import Registry
from maestro_graph.types import Invoke

ROOT = Path(__file__).resolve().parents[1]
CIRCLES = str(ROOT / "examples" / "circles.png")
QRCODE = str(ROOT / "examples" / "qrcode.png")
COUNT_Q = "How many circles are in the image?"


@pytest.fixture(scope="module")
def graph(registry):
    return build_graph(registry, make_policy("rules"))  # the tests below are written against the rules


def test_graph_shape_has_one_node_per_tier1_skill(registry, graph):
    mermaid = graph.get_graph().draw_mermaid()
    for skill in registry.tier1:
        assert f"router -.-> {skill.name};" in mermaid
        assert f"{skill.name} -. &nbsp;step&nbsp; .-> router;" in mermaid
        assert f"{skill.name} -. &nbsp;malformed call&nbsp; .-> answer;" in mermaid  # drawn as what it is
    assert "router -.-> answer;" in mermaid and "answer --> __end__;" in mermaid
    assert "__start__ --> intake;" in mermaid and "intake -.-> router;" in mermaid and "intake -.-> answer;" in mermaid


def test_rules_policy_answers_and_streams_each_step(graph):
    events = list(graph.stream({"question": COUNT_Q, "images": [CIRCLES]}, stream_mode=["custom", "values"],
                               context=MaestroContext()))
    custom = [payload for mode, payload in events if mode == "custom"]
    kinds = [e["event"] for e in custom]
    assert kinds[0] == "decision" and "step" in kinds and kinds[-1] == "answer"
    step = next(e for e in custom if e["event"] == "step")
    assert step["skill"] == "counting" and step["model"] == "opencv-vision" and step["error"] is None
    final = [payload for mode, payload in events if mode == "values"][-1]
    assert final["answer"] == "7"


def test_policy_from_run_context_and_barcode(graph):
    result = run_episode(graph, "What is the value encoded in this code?", [QRCODE],
                         context=MaestroContext(policy="fixed:zxing@@barcode-reading"))
    assert result.answer == "Wikipedia"
    assert [s.pair for s in result.steps] == ["zxing@@barcode-reading"]
    assert result.cost > 0


def test_invalid_pair_becomes_an_observation_not_a_crash(graph):
    result = run_episode(graph, COUNT_Q, [CIRCLES], context=MaestroContext(policy="fixed:zxing@@counting"))
    assert result.answer is None
    assert result.steps[0].error_kind == "policy"
    assert "zxing@@counting is not a valid pair" in result.steps[0].error
    assert "opencv-vision@@counting" in result.steps[0].error  # the observation lists valid pairs


def test_budget_limits_turns(registry):
    graph = build_graph(registry, make_policy("random"))
    for seed in range(3):
        result = run_episode(graph, COUNT_Q, [CIRCLES], context=MaestroContext(max_turns=1, greedy=False, seed=seed))
        assert len(result.steps) <= 1
        assert result.stop_reason in {"policy", "budget"}


class _ScriptedPolicy:
    """Calls the given pairs in order, then answers with the candidate that appeared first, whatever its support;
    it records the action spaces it was offered."""

    name = "scripted"
    stochastic = False

    def __init__(self, pairs: list[str]):
        self.pairs, self.spaces = pairs, []

    def distribution(self, view, space):
        self.spaces.append(space)
        if view.turn < len(self.pairs):
            return Distribution.certain(Invoke(*self.pairs[view.turn].split("@@")))
        return Distribution.certain(space.answers[0])


def test_spent_budget_leaves_the_answer_to_the_policy(registry):
    """Once the turns are spent the policy is offered only the candidates, and its choice is the answer (not the
    most confident candidate, which the counting expert's 7 would be)."""
    policy = _ScriptedPolicy(["sympy@@arithmetic", "opencv-vision@@counting"])
    graph = build_graph(registry, policy)
    result = run_episode(graph, "How many circles are in the image? 2 plus 3", [CIRCLES],
                         context=MaestroContext(max_turns=2))
    assert [s.answer for s in result.steps] == ["5", "7"]
    assert result.answer == "5" and result.stop_reason == "budget"
    assert policy.spaces[-1].pairs == () and {a.text for a in policy.spaces[-1].answers} == {"5", "7"}


def test_the_step_limit_follows_the_turn_budget(registry):
    """An episode that spends every turn on a call runs to its budget under `MaestroContext.recursion_limit`; two
    supersteps a turn alone would stop it first (intake, the last decision and the answer node are steps too)."""
    context = MaestroContext(max_turns=3, reach_floor=0)  # every turn a call: the reach may not stop it first
    graph = build_graph(registry, _ScriptedPolicy(["sympy@@arithmetic", "opencv-vision@@counting",
                                                   "rapidocr@@text-reading"]))
    asked = {"question": "How many circles are in the image? 2 plus 3", "images": [CIRCLES]}
    out = graph.invoke(asked, {"recursion_limit": context.recursion_limit}, context=context)
    assert len(out["steps"]) == 3 and out["stop"] == "budget"
    with pytest.raises(GraphRecursionError):
        graph.invoke(asked, {"recursion_limit": 2 * context.max_turns}, context=context)


def test_a_policy_that_ignores_the_spent_budget_is_overruled_and_logged(registry):
    """A policy that still calls a pair once the turns are spent gets the vote's answer; the decision event says so
    and carries no log-probability (the policy never drew that answer: -inf is not even valid JSON)."""
    policy = _ScriptedPolicy(["sympy@@arithmetic", "opencv-vision@@counting", "rapidocr@@text-reading"])
    graph = build_graph(registry, policy)
    question = {"question": "How many circles are in the image? 2 plus 3", "images": [CIRCLES]}
    events = [e for mode, e in graph.stream(question, stream_mode=["custom", "values"],
                                            context=MaestroContext(max_turns=2))
              if mode == "custom" and e["event"] == "decision"]
    last = events[-1]
    assert last["overruled"]["pair"] == "rapidocr@@text-reading" and last["log_prob"] is None
    assert last["action"]["text"] in {"5", "7"} and all("overruled" not in e for e in events[:-1])
    json.dumps(events, allow_nan=False)


def test_random_policy_samples_even_in_a_greedy_run(registry):
    """`random` is a baseline: under the default (greedy) context it must still pick at random, per seed."""
    graph = build_graph(registry, make_policy("random"))
    runs = [run_episode(graph, COUNT_Q, [CIRCLES], context=MaestroContext(max_turns=1, seed=seed))
            for seed in range(12)]
    first = {r.steps[0].pair for r in runs if r.steps}  # answering at once (no answer) is one of its draws too
    assert len(first) >= 3, first


@pytest.mark.parametrize("content", [b"", b"GIF89a truncated", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20])
def test_corrupt_image_ends_with_no_answer_and_says_why(graph, tmp_path, content):
    bad = tmp_path / "bad.png"
    bad.write_bytes(content)
    result = run_episode(graph, COUNT_Q, [str(bad)])
    assert result.answer is None
    assert result.steps and all(s.error_kind == "input" for s in result.steps)
    assert str(bad) in result.steps[0].error


def test_missing_image_and_empty_request(graph, tmp_path):
    result = run_episode(graph, COUNT_Q, [str(tmp_path / "nope.png")])
    assert result.answer is None and "no such file" in result.steps[0].error
    empty = run_episode(graph, "   ", [])
    assert empty.answer is None and empty.stop_reason.startswith("input error") and not empty.steps


def test_a_question_without_an_image_is_offered_no_pair_that_needs_one(graph):
    """The rules' keywords (price, cost, enough, left) would send this text-only word problem to `table-qa` first;
    without an image that pair is not an action, so the arithmetic pair answers it in one call."""
    question = ("A mug costs $32 in the price table. How much do 9 mugs cost? Is $300 enough to buy them, and how "
                "much money is left?")
    result = run_episode(graph, question, [])
    assert [s.skill for s in result.steps] == ["arithmetic"] and result.answer == result.steps[0].answer is not None
    assert not result.stop_reason.startswith("input error")


FAULTY = """\
skill_dirs: ["{skills}"]
models:
  - name: crasher
    description: OCR that crashes.
    capabilities: [ocr]
    backend: {{type: python, entry: "fakes:CrashingOCRExpert"}}
    cost: {{per_call: 0.25}}
  - name: sleeper
    description: OCR that hangs.
    capabilities: [ocr]
    timeout_s: 0.5
    backend: {{type: python, entry: "fakes:HangingOCRExpert", options: {{delay_s: 3}}}}
"""


@pytest.fixture(scope="module")
def faulty_graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("faulty") / "registry.yaml"
    path.write_text(FAULTY.format(skills=ROOT / "skills"))
    return build_graph(Registry.load(path))


def test_expert_crash_is_contained_and_charged(faulty_graph):
    result = run_episode(faulty_graph, "What does the sign say?", [CIRCLES],
                         context=MaestroContext(policy="fixed:crasher@@text-reading"))
    assert result.answer is None
    step = result.steps[0]
    assert step.error_kind == "expert" and "simulated engine crash" in step.error
    assert step.cost == pytest.approx(0.25)  # failed calls are charged


def test_expert_timeout_is_contained(faulty_graph):
    start = time.perf_counter()
    result = run_episode(faulty_graph, "What does the sign say?", [CIRCLES],
                         context=MaestroContext(policy="fixed:sleeper@@text-reading"))
    assert time.perf_counter() - start < 2.5
    assert result.answer is None and result.steps[0].error_kind == "expert"
    assert "timed out after 0.5s" in result.steps[0].error


def test_sqlite_checkpointer_keeps_thread_history(registry, tmp_path):
    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "ckpt.sqlite"), check_same_thread=False))
    graph = build_graph(registry, make_policy("rules"), checkpointer=saver)
    config = {"configurable": {"thread_id": "t1"}}
    result = run_episode(graph, COUNT_Q, [CIRCLES], config=config)
    state = graph.get_state(config)
    assert state.values["answer"] == result.answer == "7"
    assert len(state.values["steps"]) == len(result.steps)
    history = list(graph.get_state_history(config))
    assert len(history) >= 3  # input, router, skill, router, answer checkpoints


def test_chat_messages_input_gets_an_ai_answer(graph):
    import base64

    from langchain_core.messages import AIMessage, HumanMessage

    data = base64.b64encode(Path(CIRCLES).read_bytes()).decode()
    message = HumanMessage(content=[{"type": "text", "text": COUNT_Q},
                                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}])
    out = graph.invoke({"messages": [message]}, context=MaestroContext())
    assert out["answer"] == "7"
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content == "7"


def test_interrupted_episode_resumes_from_its_last_step(registry, tmp_path):
    """Stop an episode after its first step (as a crash would), then resume the thread: the step is not re-run."""
    db = str(tmp_path / "ckpt.sqlite")
    config = {"configurable": {"thread_id": "t2"}}
    first = build_graph(registry, make_policy("rules"),
                        checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    for chunk in first.stream({"question": COUNT_Q, "images": [CIRCLES]}, config, stream_mode="updates",
                              context=MaestroContext()):
        if "counting" in chunk:
            break  # the process "dies" right after the skill step was checkpointed
    again = build_graph(registry, make_policy("rules"),
                        checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    assert again.get_state(config).next == ("router",)
    result = run_episode(again, COUNT_Q, [CIRCLES], config=config)  # the same question: the thread resumes
    assert result.answer == "7" and len(result.steps) == 1
    assert run_episode(again, COUNT_Q, [CIRCLES], config=config).answer == "7"  # finished: stored result


def test_a_thread_is_a_conversation_each_run_answers_its_own_question(registry, tmp_path):
    """The second run on a thread answered the first question again. Each run with input is a new
    episode (from `question`, or the trailing human message of a chat), the thread keeps every finished episode in
    `episodes`, images not sent again are the thread's, and the checkpointer (SQLite here) keeps all of it."""
    from langchain_core.messages import AIMessage, HumanMessage

    db = str(tmp_path / "ckpt.sqlite")
    graph = build_graph(registry, make_policy("rules"),
                        checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    config = {"configurable": {"thread_id": "chat"}}
    first = graph.invoke({"question": COUNT_Q, "images": [CIRCLES]}, config)
    second = graph.invoke({"question": "What text does the QR code encode?", "images": [QRCODE]}, config)
    assert (first["answer"], second["answer"]) == ("7", "Wikipedia")
    assert [s["skill"] for s in second["steps"]] == ["barcode-reading"]  # the first episode's steps are not carried
    assert [(e["question"], e["answer"]) for e in second["episodes"]] == [
        (COUNT_Q, "7"), ("What text does the QR code encode?", "Wikipedia")]
    follow_up = graph.invoke({"messages": [HumanMessage(content=COUNT_Q)]}, config)  # about the thread's image
    assert follow_up["answer"] is not None and follow_up["answer"] != "7"  # the QR code has no circles to count
    assert len(follow_up["episodes"]) == 3
    again = graph.invoke({"messages": [HumanMessage(content="What text does the QR code encode?")]}, config)
    assert again["answer"] == "Wikipedia" and isinstance(again["messages"][-1], AIMessage)
    assert [type(m).__name__ for m in again["messages"]] == ["HumanMessage", "AIMessage"] * 2


def test_a_missing_image_ends_with_an_input_error_event(graph):
    """Not `answer=None, stop_reason="policy"`: the reason reaches the caller, also as a typed stream event."""
    missing = str(Path(CIRCLES).with_name("no-such-image.png"))
    events = [chunk for chunk in graph.stream({"question": COUNT_Q, "images": [missing]}, stream_mode="custom")]
    errors = [e for e in events if e["event"] == "error"]
    assert errors and errors[0]["kind"] == "input" and "no such file" in errors[0]["message"]
    assert events[-1]["event"] == "answer" and events[-1]["stop_reason"].startswith("input error: image ")


def test_checkpoints_keep_maestro_types_without_serializer_warnings(registry, tmp_path):
    """`maestro serve --checkpoint-db` reads its checkpoints back with no
    "Deserializing unregistered type ... will be blocked" warning on stderr: the state holds plain JSON values (the
    typed fields as their strings, equal to the types), which any checkpointer reads, the Agent Server's too."""
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    from maestro_graph.doors.serve.checkpoint_db import open_checkpointer
    from maestro_graph.types import ErrorKind, StopReason

    events: list[dict] = []
    unregister = register_serde_event_listener(events.append)
    try:
        graph = build_graph(registry, make_policy("rules"), checkpointer=open_checkpointer(tmp_path / "ck.sqlite"))
        config = {"configurable": {"thread_id": "t-1"}}
        graph.invoke({"question": COUNT_Q, "images": [str(tmp_path / "missing.png")]}, config)
        values = graph.get_state(config).values
    finally:
        unregister()
    assert values["stop"] == StopReason.INPUT_ERROR and values["steps"][0]["error_kind"] == ErrorKind.INPUT
    assert type(values["stop"]) is str and type(values["steps"][0]["error_kind"]) is str
    assert [e for e in events if e["kind"].startswith("msgpack")] == []
