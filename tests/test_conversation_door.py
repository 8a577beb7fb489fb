"""A real `maestro serve` (the CLI, as a subprocess) asked through the official `openai` client: a question with 30
options (labels beyond Z), and a follow-up that refers to the previous answer, both as an OpenAI chat that carries
its history in `messages` and on a server thread that keeps it."""

from __future__ import annotations

import json
import os

import openai
import pytest
from servers import EXAMPLES, data_url, maestro_serve

from maestro_graph.episode.graph import build_graph
from maestro_graph.policy import make_policy
from maestro_graph.types import StopReason

QR_QUESTION = "What text does the QR code encode?"
FOLLOW_UP = "How many letters does it have?"
GENERAL_QA_PROMPT = "a word, a name, a number or an option"
"""The general-qa skill's instructions: the reply a small chat model gives when it sees no conversation."""

KEY_ENV = "MAESTRO_TEST_CONVERSATION_KEY"
KEY = "conversation-key"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conversation")
    args = ["--checkpoint-db", str(folder / "threads.sqlite"), "--api-key-env", KEY_ENV]
    os.environ[KEY_ENV] = KEY
    try:
        with maestro_serve(args, folder / "serve.log") as (_, url):
            yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=300)
    finally:
        del os.environ[KEY_ENV]


def _qr_message(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": data_url(EXAMPLES / "qrcode.png")}}]}


@pytest.mark.slow
def test_thirty_options_are_labelled_past_z_and_answered(client):
    """Option 28 used to get the label "\\", which broke the scoring regex (a 500) once an answer was checked
    against it: the right option is the last, "AD"."""
    options = [f"Word{i}" for i in range(29)] + ["Wikipedia"]
    reply = client.chat.completions.create(model="maestro", messages=[_qr_message(QR_QUESTION)],
                                           extra_body={"choices": options})
    assert reply.choices[0].message.content == "Wikipedia"


def _evidence(reply, skill: str) -> list[str]:
    return [s["evidence"] for s in reply.model_extra["maestro"]["steps"] if s["skill"] == skill]


@pytest.mark.slow
def test_a_follow_up_in_an_openai_chat_sees_the_previous_answer(client):
    first = client.chat.completions.create(model="maestro", messages=[_qr_message(QR_QUESTION)])
    assert first.choices[0].message.content == "Wikipedia"
    history = [_qr_message(QR_QUESTION), {"role": "assistant", "content": "Wikipedia"},
               {"role": "user", "content": FOLLOW_UP}]
    reply = client.chat.completions.create(model="maestro", messages=history)
    assert reply.choices[0].message.content == "9", reply.model_extra["maestro"]
    assert any("'Wikipedia' (the previous answer) has 9 letters" in e for e in _evidence(reply, "general-qa"))
    assert GENERAL_QA_PROMPT not in reply.choices[0].message.content.lower()


@pytest.mark.slow
def test_a_follow_up_on_a_thread_sees_the_threads_previous_answer(client):
    first = client.chat.completions.create(model="maestro", messages=[_qr_message(QR_QUESTION)],
                                           extra_body={"thread_id": "qr-follow-up"})
    assert first.choices[0].message.content == "Wikipedia"
    reply = client.chat.completions.create(model="maestro", messages=[{"role": "user", "content": FOLLOW_UP}],
                                           extra_body={"thread_id": "qr-follow-up"})
    assert reply.choices[0].message.content == "9", reply.model_extra["maestro"]


@pytest.mark.parametrize("history", ["junk", [{"question": 3}], [{"answer": "Wikipedia"}]])
def test_a_malformed_history_ends_the_episode_with_an_input_error(registry, history):
    """`history` comes from clients (LangServe, the Agent Server): a wrong shape is their input's fault, named."""
    out = build_graph(registry, make_policy("rules")).invoke({"question": FOLLOW_UP, "images": [], "history": history})
    assert out["stop"] == StopReason.INPUT_ERROR and "history" in out["stop_reason"] and out["steps"] == []


CIRCLES_QUESTION = "How many circles are in the image?"


def _circles_message(text: str) -> dict:
    image = {"type": "image_url", "image_url": {"url": data_url(EXAMPLES / "circles.png")}}
    return {"role": "user", "content": [{"type": "text", "text": text}, image]}


@pytest.mark.slow
def test_a_follow_up_on_a_thread_is_about_the_threads_image(client):
    """The second question sends no image; the thread's image is what it is about (it used to end
    with `input error: skill 'shapes' needs an image` and an empty 200)."""
    first = client.chat.completions.create(model="maestro", messages=[_circles_message(CIRCLES_QUESTION)],
                                           extra_body={"thread_id": "circles-follow-up"})
    assert first.choices[0].message.content == "7"
    reply = client.chat.completions.create(
        model="maestro", messages=[{"role": "user", "content": "Are there more than 5 circles?"}],
        extra_body={"thread_id": "circles-follow-up"})
    assert reply.choices[0].message.content == "Yes", reply.model_extra["maestro"]
    assert [s["skill"] for s in reply.model_extra["maestro"]["steps"]] == ["counting"]


@pytest.mark.slow
def test_a_chat_models_follow_up_is_about_the_earlier_turns_image(client, monkeypatch):
    """Through LangChain's `ChatOpenAI`: the image of an earlier user turn is the conversation's
    image; with no image anywhere the request is a 400 that says so (never a 200 without an answer)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model="maestro", base_url=str(client.base_url), api_key=KEY, max_retries=0, timeout=300)
    asked = HumanMessage(content=_circles_message(CIRCLES_QUESTION)["content"])
    reply = chat.invoke([asked, AIMessage(content="7"), HumanMessage(content="Do any two of the circles touch?")])
    assert reply.content == "Yes"
    with pytest.raises(openai.BadRequestError, match="no image: this is a question for counting") as refused:
        chat.invoke([HumanMessage(content="Do any two of the circles touch?")])
    assert refused.value.status_code == 400


@pytest.mark.slow
def test_the_openai_client_gets_a_400_naming_the_missing_image_plain_and_streamed(client):
    ask = [{"role": "user", "content": "Are there more than 5 circles?"}]
    with pytest.raises(openai.BadRequestError, match="neither the request nor its conversation has one"):
        client.chat.completions.create(model="maestro", messages=ask)
    with pytest.raises(openai.APIError, match="neither the request nor its conversation has one"):
        for _ in client.chat.completions.create(model="maestro", messages=ask, stream=True):
            pass


def test_the_cli_answers_a_follow_up_on_its_thread_from_the_threads_image(tmp_path):
    """On the command line: the second `ask` of a thread names no image."""
    from typer.testing import CliRunner

    from maestro_graph.doors.cli import app

    runner, thread = CliRunner(), ["--checkpoint-db", str(tmp_path / "x.sqlite"), "--thread", "a", "--json"]
    first = runner.invoke(app, ["ask", CIRCLES_QUESTION, "-i", str(EXAMPLES / "circles.png"), *thread])
    assert first.exit_code == 0 and json.loads(first.output)["answer"] == "7", first.output
    follow_up = runner.invoke(app, ["ask", "Are there more than 5 circles?", *thread])
    assert follow_up.exit_code == 0, follow_up.output
    assert json.loads(follow_up.output)["answer"] == "Yes"
    elsewhere = runner.invoke(app, ["ask", "Are there more than 5 circles?", "--checkpoint-db",
                                    str(tmp_path / "x.sqlite"), "--thread", "b"])
    assert elsewhere.exit_code == 1 and "no image" in " ".join(elsewhere.output.split())
