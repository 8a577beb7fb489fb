"""An episode that ends without an answer says so on the OpenAI door (`finish_reason:
"no_answer"`, null `content` and a `refusal` naming the stop reason, `maestro.stop`), plain and streamed, through
the `openai` client; and the two messages that read wrong: "image image 0: corrupt ..." and "confidence 0.99 is
below min_confidence 0.99"."""

from __future__ import annotations

import math
import re

import openai
import pytest
from servers import EXAMPLES, data_url

from maestro_graph.core.calibration import ConfidenceModel
from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.doors.serve.protocol import NO_ANSWER
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy

QR_QUESTION = "What text does the QR code encode?"


@pytest.fixture(scope="module")
def client(registry):
    with running_app(create_app(registry, ServeSettings(policy="rules"))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _qr(image: str | None = None) -> list[dict]:
    url = image or data_url(EXAMPLES / "qrcode.png")
    return [{"role": "user", "content": [{"type": "text", "text": QR_QUESTION},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def test_an_episode_without_an_answer_finishes_with_no_answer_and_says_why(client):
    reply = client.chat.completions.create(model="maestro", messages=_qr(), extra_body={"max_cost": 0})
    choice, trace = reply.choices[0], reply.model_extra["maestro"]
    assert choice.finish_reason == NO_ANSWER == "no_answer"
    assert choice.message.content is None
    assert choice.message.refusal == "No answer: the episode ended without one (budget)"
    assert trace["stop"] == "budget" and trace["stop_reason"] == "budget" and trace["steps"] == []
    answered = client.chat.completions.create(model="maestro", messages=_qr())
    assert answered.choices[0].finish_reason == "stop" and answered.choices[0].message.content == "Wikipedia"
    assert answered.choices[0].message.refusal is None and answered.model_extra["maestro"]["stop"] == "policy"


def test_a_streamed_episode_without_an_answer_streams_the_refusal_and_no_answer(client):
    chunks = list(client.chat.completions.create(model="maestro", messages=_qr(), stream=True,
                                                 extra_body={"max_cost": 0}))
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert "".join(d.delta.content or "" for d in deltas) == ""
    assert [d.delta.refusal for d in deltas if d.delta.refusal] == ["No answer: the episode ended without one (budget)"]
    assert deltas[-1].finish_reason == "no_answer"
    done = [c.model_extra["maestro"] for c in chunks if (c.model_extra.get("maestro") or {}).get("event") == "done"]
    assert done and done[0]["stop"] == "budget"


def test_a_corrupt_image_is_named_once(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="maestro", messages=_qr(data_url(EXAMPLES / "qrcode.png")[:-400]))
    error = refused.value.body
    assert error["code"] == "invalid_image"
    assert error["message"].startswith("image 0: corrupt or truncated image ("), error["message"]


def test_a_withheld_answer_reads_below_the_floor(registry):
    """An answer 0.986 sure under `min_confidence` 0.99 was "confidence 0.99 is below min_confidence 0.99": the
    confidence is shown with the decimals it takes to read as below the floor. (A confidence model with no weights
    gives every answer the same probability.)"""
    sure = ConfidenceModel(weights={}, bias=math.log(0.986 / 0.014))
    graph = build_graph(registry, make_policy("rules"), confidence=sure)
    result = run_episode(graph, QR_QUESTION, [data_url(EXAMPLES / "qrcode.png")],
                         context=MaestroContext(min_confidence=0.99))
    assert result.answer is None
    assert result.stop_reason == "low confidence: the answer's confidence 0.986 is below min_confidence 0.99"
    shown, floor = map(float, re.findall(r"\d\.\d+", result.stop_reason))
    assert shown < floor
