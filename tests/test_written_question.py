"""A question from the image is used only when it is one: a blank question over an image that
says "What is 12 + 30?" is 42 (and so is the question typed), routed on its text without the image; a blank or
invisible question over three circles, whose OCR reads "OOO", is refused with a clear message, on the OpenAI route
(`openai`), LangServe (`RemoteRunnable`), the CLI and the Agent Server (`langgraph_sdk`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from PIL import Image, ImageDraw, ImageFont
from servers import EXAMPLES, ROOT, data_url, langgraph_dev, server_env

from maestro_graph.core.question_text import EMPTY_QUESTION
from maestro_graph.core.tasks import Task
from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.episode.written_question import reads_as_question, written_calculation
from maestro_graph.policy import ActionSpace, EpisodeView, make_policy
from maestro_graph.training.evaluation.routing_record import INPUT_ERROR, first_calls
from maestro_graph.types import StopReason

INVISIBLE = "\u2800\u200b\u3164"
"""A blank braille pattern, a zero-width space and a Hangul filler: nothing to read."""
NOT_A_QUESTION = "is not a question"


@pytest.fixture(scope="module")
def sum_image(tmp_path_factory) -> Path:
    """An image whose only text is the question "What is 12 + 30?" (Pillow's bundled font: the same on every
    machine)."""
    path = tmp_path_factory.mktemp("written") / "sum.png"
    image = Image.new("RGB", (640, 160), "white")
    ImageDraw.Draw(image).text((20, 50), "What is 12 + 30?", fill="black", font=ImageFont.load_default(size=48))
    image.save(path)
    return path


@pytest.mark.parametrize(("text", "asks"), [
    ("What is 12 + 30?", True), ("How many circles are there", True), ("Count the stars.", True),
    ("17 * 23 =", True), ("Which is bigger? A. 3 B. 5", True), ("Colour: (A) red (B) blue", True),
    ("OOO", False), ("00O", False), ("Wikipedia", False), ("SALE 50% OFF", False), ("", False),
])
def test_a_text_read_from_an_image_is_a_question_only_when_it_asks(text, asks):
    assert reads_as_question(text) is asks


@pytest.mark.parametrize(("text", "calculation"), [
    ("What is 12 + 30?", True), ("(3 + 4) × 5 = ?", True), ("calculate 1,200 / 4", True), ("17*23", True),
    ("What is 12 + 30 apples and 5 pears?", False), ("How many circles are there?", False), ("What is 12?", False),
])
def test_a_written_calculation_is_the_whole_question(text, calculation):
    assert written_calculation(text) is calculation


@pytest.fixture(scope="module")
def graph(registry):
    return build_graph(registry, make_policy("neural"))


@pytest.mark.parametrize("question", ["", "What is 12 + 30?"])
def test_a_calculation_over_its_image_is_routed_on_its_text(graph, registry, sum_image, question):
    """It was `30`, from rapidocr@@table-qa reading the image, typed or read."""
    result = run_episode(graph, question, [data_url(sum_image)])
    assert result.answer == "42"
    assert "table-qa" not in [s.skill for s in result.steps] and result.steps[-1].skill == "arithmetic"
    # the episode records the question it was routed on, so a trainer re-scores each decision on what the router
    # saw: on the blank question the arithmetic pair was declined, and re-scoring the call crashed GRPO
    assert result.question == "What is 12 + 30?"
    seen = EpisodeView(result.question, (), result.choices, tuple(result.steps[:-1]), 4, 10.0)
    assert "sympy@@arithmetic" in [p.id for p in ActionSpace.build(registry, seen).pairs]


@pytest.mark.parametrize("question", ["", INVISIBLE])
def test_a_blank_question_over_an_image_without_one_is_refused(graph, question):
    """It was "The person who is wearing the shoes is 00O" (general-qa answering the OCR fragment as a question)."""
    result = run_episode(graph, question, [data_url(EXAMPLES / "circles.png")])
    assert result.answer is None and result.stop == StopReason.INPUT_ERROR
    assert result.stop_reason.startswith(f"input error: {EMPTY_QUESTION}") and NOT_A_QUESTION in result.stop_reason
    assert [s.skill for s in result.steps] == ["ocr"]


def test_the_routing_record_sees_the_question_an_episode_routes_on(graph, registry, sum_image):
    """`first_calls` (what a routing record guards) had built the router's view of a blank question as blank, and
    with the image of a written calculation: on two mathverse items of the record it named a pair the episode, which
    reads the question first, never chose. Now each first call is the episode's first decision, or the input error
    where the text read is no question."""
    circles = str(EXAMPLES / "circles.png")
    tasks = [Task(id=f"t{i}", question=question, images=[image], answer="42", answer_type="number")
             for i, (question, image) in enumerate([("", str(sum_image)), ("What is 12 + 30?", str(sum_image)),
                                                    ("", circles), ("How many circles are there?", circles)])]
    episodes = {task.id: run_episode(graph, task.question, task.images) for task in tasks}
    assert episodes["t2"].stop == StopReason.INPUT_ERROR and not episodes["t2"].decisions
    expected = {task_id: result.decisions[0].pair or "answer" if result.decisions else INPUT_ERROR
                for task_id, result in episodes.items()}
    assert expected["t0"] == expected["t1"] == "sympy@@arithmetic"
    assert first_calls(registry, tasks) == expected


@pytest.fixture(scope="module")
def base_url(registry):
    with running_app(create_app(registry, ServeSettings(api_key_env="MAESTRO_TEST_WRITTEN_KEY"))) as url:
        yield url


def _user(text: str, image: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": image}}]}]


@pytest.mark.slow
def test_the_http_doors_read_a_question_only_when_it_is_one(base_url, sum_image):
    from langserve import RemoteRunnable

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)
    read = client.chat.completions.create(model="maestro", messages=_user(INVISIBLE, data_url(sum_image)))
    assert read.choices[0].message.content == "42"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="maestro", messages=_user(INVISIBLE, data_url(EXAMPLES / "circles.png")))
    assert refused.value.body["code"] == "empty_request" and NOT_A_QUESTION in refused.value.body["message"]
    remote = RemoteRunnable(f"{base_url}/maestro/", timeout=300)
    assert remote.invoke({"question": "", "images": [data_url(sum_image)]})["answer"] == "42"
    circles = remote.invoke({"question": INVISIBLE, "images": [data_url(EXAMPLES / "circles.png")]})
    assert circles["answer"] is None and NOT_A_QUESTION in circles["stop_reason"]


@pytest.mark.slow
def test_the_cli_reads_a_question_only_when_it_is_one(sum_image):
    maestro = str(Path(sys.executable).parent / "maestro")

    def ask(image: Path) -> tuple[int, dict]:
        done = subprocess.run([maestro, "ask", "", "--image", str(image), "--json"], cwd=ROOT, env=server_env(),
                              capture_output=True, text=True, timeout=600)
        return done.returncode, json.loads(done.stdout)

    code, out = ask(sum_image)
    assert code == 0 and out["answer"] == "42"
    code, out = ask(EXAMPLES / "circles.png")
    assert code == 1 and out["answer"] is None and NOT_A_QUESTION in out["stop_reason"]


@pytest.mark.slow
def test_the_agent_server_reads_a_question_only_when_it_is_one(tmp_path, sum_image):
    from langgraph_sdk import get_client

    async def go(url: str) -> tuple[dict, dict]:
        client = get_client(url=url)
        read = await client.runs.wait(None, "maestro", input={"question": "", "images": [data_url(sum_image)]})
        refused = await client.runs.wait(None, "maestro", input={
            "question": INVISIBLE, "images": [data_url(EXAMPLES / "circles.png")]})
        return read, refused

    with langgraph_dev(tmp_path) as url:
        read, refused = asyncio.run(go(url))
    assert read["answer"] == "42"
    assert refused["answer"] is None and NOT_A_QUESTION in refused["stop_reason"]
