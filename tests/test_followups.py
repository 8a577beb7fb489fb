"""Conversations carry facts: a follow-up about an earlier answer ("What is double that number?"
after "How many circles are in the image?" -> "7") is 14, worked out from the conversation, on every door that keeps
one: an OpenAI `messages` history and a `maestro serve` thread (the `openai` client), a LangServe thread
(`RemoteRunnable` with `thread_id`), a CLI thread (`maestro ask --thread`) and an Agent Server thread
(`langgraph_sdk`); one that names an earlier answer the conversation cannot supply is refused, never guessed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from servers import EXAMPLES, ROOT, data_url, langgraph_dev, server_env

from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.episode.followups import Followup, Unresolved, resolve
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy
from maestro_graph.types import StopReason, Turn

CIRCLES = data_url(EXAMPLES / "circles.png")
COUNT = "How many circles are in the image?"
DOUBLE = "What is double that number?"


def _turns(*answers: str) -> list[Turn]:
    return [Turn(question=f"question {i}", answer=a) for i, a in enumerate(answers)]


@pytest.mark.parametrize(("question", "answers", "resolved"), [
    (DOUBLE, ["7"], "What is 7 * 2?"),
    ("what's twice that?", ["7"], "What is 7 * 2?"),
    ("And half of the answer?", ["7"], "What is 7 / 2?"),
    ("that number plus 3?", ["7"], "What is 7 + 3?"),
    ("Add 5 to it", ["7 circles"], "What is 7 + 5?"),
    ("is it more than 5?", ["7"], "Is 7 more than 5?"),
    ("Is that number even?", ["7"], "Is 7 even?"),
    ("and the total?", ["7", "3"], "What is 7 + 3?"),
    ("What is the sum of them?", ["$1,200", "300"], "What is 1200 + 300?"),
])
def test_a_follow_up_about_earlier_answers_becomes_a_question_that_stands_alone(question, answers, resolved):
    followup = resolve(question, _turns(*answers))
    assert isinstance(followup, Followup) and followup.question == resolved


@pytest.mark.parametrize(("question", "answers", "why"), [
    (DOUBLE, [], "there is no earlier answer"),
    (DOUBLE, ["Wikipedia"], "'Wikipedia', is not a number"),
    ("and the total?", ["7"], "1 earlier answer(s) that are numbers"),
    ("What is the total of them?", [], "no earlier answer(s)"),
])
def test_a_follow_up_naming_an_answer_the_conversation_lacks_is_asked_back(question, answers, why):
    refused = resolve(question, _turns(*answers))
    assert isinstance(refused, Unresolved) and refused.reason.startswith("which number") and why in refused.reason


@pytest.mark.parametrize(("question", "answers"), [
    ("How many letters does it have?", ["Wikipedia"]),  # general-qa counts the earlier answer's letters itself
    ("Is it red?", ["7"]),
    ("What is the total?", []),  # a receipt's total: a question about the image
    ("is it more than 5?", []),  # a bare "it" with no earlier number may be something in the image
    ("is it more than 5?", ["Wikipedia"]),
    ("How many circles are in the image?", ["7"]),
])
def test_other_questions_go_on_as_asked(question, answers):
    assert resolve(question, _turns(*answers)) is None


@pytest.fixture(scope="module")
def graph(registry):
    return build_graph(registry, make_policy("neural"))


@pytest.mark.parametrize(("question", "earlier", "answer"), [
    (DOUBLE, ["7"], "14"), ("is it more than 5?", ["7"], "yes"), ("Is it less than 5?", ["7"], "no"),
    ("and the total?", ["7", "3"], "10"),
])
def test_the_graph_answers_a_follow_up_from_the_conversation_without_the_image(graph, question, earlier, answer):
    """With the circles still the conversation's image: the counting skill must not run again (it answered 10 for
    "double that number", counting the circles plus something)."""
    history = [Turn(question=COUNT, answer=earlier[0], images=[CIRCLES]), *_turns(*earlier[1:])]
    result = run_episode(graph, question, [], history=history)
    assert result.answer == answer and result.answer_source == "candidate"
    assert [s.skill for s in result.steps] == ["calculator"] and result.stop_reason.startswith("policy")
    assert result.confidence is not None and result.confidence > 0.5


def test_a_follow_up_is_capped_at_the_confidence_of_the_answers_it_came_from():
    """The arithmetic is exact, its inputs only as sure as the answers they were: the cap is the latest answer's
    confidence (the least of those summed for a total); a client's history without confidences puts none."""
    sure = [Turn(question="a", answer="7", confidence=0.9), Turn(question="b", answer="3", confidence=0.4)]
    assert resolve(DOUBLE, sure).confidence_cap == 0.4
    assert resolve(DOUBLE, sure[:1]).confidence_cap == 0.9
    assert resolve("and the total?", [*sure, Turn(question="c", answer="red", confidence=0.1)]).confidence_cap == 0.4
    assert resolve(DOUBLE, _turns("7")).confidence_cap is None


def test_the_graph_gives_a_follow_up_no_more_confidence_than_its_earlier_answer(graph):
    unsure = [Turn(question=COUNT, answer="7", images=[CIRCLES], confidence=0.31)]
    capped = run_episode(graph, DOUBLE, [], history=unsure)
    free = run_episode(graph, DOUBLE, [], history=[Turn(question=COUNT, answer="7", images=[CIRCLES])])
    assert capped.answer == free.answer == "14"
    assert free.confidence > 0.31 and capped.confidence == 0.31  # the cap, not the calculator's own certainty
    assert capped.confidence_basis == free.confidence_basis  # what the model saw is recorded unchanged


def test_the_graph_refuses_a_follow_up_it_cannot_resolve(graph):
    result = run_episode(graph, DOUBLE, [CIRCLES], history=[Turn(question="What text?", answer="Wikipedia")])
    assert result.answer is None and result.confidence is None and result.stop == StopReason.INPUT_ERROR
    assert "which number do you mean?" in result.stop_reason and not result.steps


@pytest.fixture(scope="module")
def base_url(registry, tmp_path_factory):
    db = tmp_path_factory.mktemp("followups") / "threads.sqlite"
    settings = ServeSettings(api_key_env="MAESTRO_TEST_FOLLOWUPS_KEY", checkpoint_db=db, request_timeout_s=300)
    with running_app(create_app(registry, settings)) as url:
        yield url


def _user(text: str, *images: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        *({"type": "image_url", "image_url": {"url": u}} for u in images)]}


@pytest.mark.slow
def test_an_openai_history_carries_the_earlier_answer(base_url):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    first = client.chat.completions.create(model="maestro", messages=[_user(COUNT, CIRCLES)])
    assert first.choices[0].message.content == "7"
    history = [_user(COUNT, CIRCLES), {"role": "assistant", "content": "7"}]
    double = client.chat.completions.create(model="maestro", messages=[*history, _user(DOUBLE)])
    assert double.choices[0].message.content == "14", double.model_extra["maestro"]
    more = client.chat.completions.create(model="maestro", messages=[*history, _user("is it more than 5?")])
    assert more.choices[0].message.content == "yes"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="maestro", messages=[
            _user("What text is written?", CIRCLES), {"role": "assistant", "content": "OOO"}, _user(DOUBLE)])
    assert refused.value.body["code"] == "input_error" and "which number do you mean?" in refused.value.body["message"]


@pytest.mark.slow
def test_a_maestro_serve_thread_carries_the_earlier_answers(base_url):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)

    def ask(*message: str) -> dict:
        reply = client.chat.completions.create(model="maestro", messages=[_user(*message)],
                                               extra_body={"thread_id": "circles-follow-up"})
        return {"answer": reply.choices[0].message.content, **reply.model_extra["maestro"]}

    assert ask(COUNT, CIRCLES)["answer"] == "7"
    assert ask(DOUBLE)["answer"] == "14"
    again = ask(DOUBLE)  # a retried follow-up replays its answer, not double the 14
    assert again["answer"] == "14" and again["replayed"] is True
    assert ask("and the total?")["answer"] == "21"  # 7 + 14, the earlier answers that are numbers


@pytest.mark.slow
def test_a_thread_follow_up_is_no_surer_than_its_answer_and_the_thread_view_says_so(base_url):
    """On a `maestro serve` thread (the `openai` client): the follow-up's confidence is capped at the earlier
    answer's, and `GET /v1/threads/ID` gives the latest answer's source and confidence at the top level, as the
    chat response's `maestro` field does."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)

    def ask(*message: str) -> dict:
        reply = client.chat.completions.create(model="maestro", messages=[_user(*message)],
                                               extra_body={"thread_id": "circles-confidence"})
        return {"answer": reply.choices[0].message.content, **reply.model_extra["maestro"]}

    count, double = ask(COUNT, CIRCLES), ask(DOUBLE)
    assert (count["answer"], double["answer"]) == ("7", "14")
    assert 0 < double["confidence"] <= count["confidence"] < 1
    view = client.get("/threads/circles-confidence", cast_to=httpx.Response).json()
    assert (view["answer"], view["answer_source"], view["confidence"]) == ("14", double["answer_source"],
                                                                          double["confidence"])
    assert view["stop"] == "policy" and [e["confidence"] for e in view["episodes"]] == [count["confidence"],
                                                                                        double["confidence"]]


@pytest.mark.slow
def test_langserve_continues_a_thread_by_its_id(base_url, registry):
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", timeout=300)
    first = remote.invoke({"question": COUNT, "images": [CIRCLES], "thread_id": "langserve-circles"})
    assert first["answer"] == "7" and first["thread_id"] == "langserve-circles"
    follow_up = remote.invoke({"question": DOUBLE, "thread_id": "langserve-circles"})
    assert follow_up["answer"] == "14" and follow_up["thread_id"] == "langserve-circles"
    settings = ServeSettings(api_key_env="MAESTRO_TEST_FOLLOWUPS_KEY")
    with running_app(create_app(registry, settings)) as url:  # no --checkpoint-db: a thread id is refused
        with pytest.raises(httpx.HTTPStatusError) as refused:
            RemoteRunnable(f"{url}/maestro/").invoke({"question": DOUBLE, "thread_id": "langserve-circles"})
    assert refused.value.response.status_code == 400
    assert refused.value.response.json()["error"]["code"] == "persistence_disabled"


@pytest.mark.slow
def test_a_langserve_follow_up_without_an_image_is_about_the_threads_image(base_url):
    """A question about the image, sent without one on a LangServe thread that has it: answered from the thread's
    image (was a 400 before LangServe kept threads), through LangServe's own client."""
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", timeout=300)
    first = remote.invoke({"question": COUNT, "images": [CIRCLES], "thread_id": "langserve-image"})
    again = remote.invoke({"question": "How many circles are there?", "thread_id": "langserve-image"})
    assert first["answer"] == again["answer"] == "7", again
    assert [s["skill"] for s in again["steps"]] == ["counting"] and again["thread_id"] == "langserve-image"


@pytest.mark.slow
def test_a_cli_thread_carries_the_earlier_answer(tmp_path):
    maestro = str(Path(sys.executable).parent / "maestro")
    db = ["--checkpoint-db", str(tmp_path / "threads.sqlite"), "--thread", "cli-circles", "--json"]

    def ask(*args: str) -> dict:
        done = subprocess.run([maestro, "ask", *args, *db], cwd=ROOT, env=server_env(), capture_output=True,
                              text=True, timeout=600)
        return json.loads(done.stdout)

    assert ask(COUNT, "--image", str(EXAMPLES / "circles.png"))["answer"] == "7"
    assert ask(DOUBLE)["answer"] == "14"


@pytest.mark.slow
def test_an_agent_server_thread_carries_the_earlier_answer(tmp_path):
    from langgraph_sdk import get_client

    async def go(url: str) -> tuple[dict, dict, dict]:
        client = get_client(url=url)
        thread = (await client.threads.create())["thread_id"]
        first = await client.runs.wait(thread, "maestro", input={"question": COUNT, "images": [CIRCLES]})
        double = await client.runs.wait(thread, "maestro", input={"question": DOUBLE})
        chat = await client.runs.wait(thread, "maestro", input={"messages": [
            {"role": "human", "content": "is it more than 5?"}]})
        return first, double, chat

    with langgraph_dev(tmp_path) as url:
        first, double, chat = asyncio.run(go(url))
    assert (first["answer"], double["answer"], chat["answer"]) == ("7", "14", "yes")
    assert chat["messages"][-1]["type"] == "ai" and chat["messages"][-1]["content"] == "yes"
