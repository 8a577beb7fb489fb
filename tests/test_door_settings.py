"""Every door honours the same run settings or refuses them: `min_confidence`, `max_turns`,
`max_cost` and `policy` through the OpenAI route (the `openai` client), LangServe (`RemoteRunnable`), `remote_agent`
and a bare `RemoteGraph` against `langgraph dev`, next to the local agent they must agree with; a bad value is a 400
in OpenAI's error shape on both HTTP doors, and so is an unknown body field."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from servers import EXAMPLES, data_url, langgraph_dev

import maestro_graph.doors.agents as embedded
from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.policy import PolicyCatalog

CIRCLES = data_url(EXAMPLES / "circles.png")
COUNT = "How many circles are in the image?"
"""Answered 7 at a confidence of about 0.99 by the shipped policy: a `min_confidence` of 0.995 withholds it."""
TITLE = "What is the title of the chart?"
"""Asked of the circles, the shipped policy calls three pairs before it stops: `max_turns=1` must stop it at one."""
SIGN = "What does the sign say?"
"""The shipped policy asks another skill first than the keyword rules, which read the text first: which policy ran
shows."""


@dataclass(frozen=True)
class Outcome:
    """What every door says of a run, read the same way: the answer, the skills called, the stop reason."""

    answer: str | None
    skills: list[str]
    stop_reason: str


Ask = Callable[[str, dict[str, Any]], Outcome]


@pytest.fixture(scope="module")
def base_url(registry):
    settings = ServeSettings(api_key_env="MAESTRO_TEST_DOOR_SETTINGS_KEY", request_timeout_s=300)
    with running_app(create_app(registry, settings)) as url:
        yield url


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory):
    with langgraph_dev(tmp_path_factory.mktemp("settings-lg")) as url:
        yield url


def _openai(base_url: str) -> Ask:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=300)

    def ask(question: str, settings: dict[str, Any]) -> Outcome:
        reply = client.chat.completions.create(model="maestro", extra_body=settings, messages=[
            {"role": "user", "content": [{"type": "text", "text": question},
                                         {"type": "image_url", "image_url": {"url": CIRCLES}}]}])
        trace = reply.model_extra["maestro"]
        return Outcome(reply.choices[0].message.content or None, [s["skill"] for s in trace["steps"]],
                       trace["stop_reason"])

    return ask


def _langserve(base_url: str) -> Ask:
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", timeout=300)

    def ask(question: str, settings: dict[str, Any]) -> Outcome:
        out = remote.invoke({"question": question, "images": [CIRCLES], **settings})
        return Outcome(out["answer"], [s["skill"] for s in out["steps"]], out["stop_reason"])

    return ask


def _agent(agent: Any) -> Ask:
    def ask(question: str, settings: dict[str, Any]) -> Outcome:
        out = agent.invoke({"question": question, "images": [CIRCLES]},
                           context=embedded.AgentContext(maestro=MaestroContext(**settings)))
        return Outcome(out.get("answer"), [s["skill"] for s in out.get("steps", [])], out["stop_reason"])

    return ask


def _remote_graph(url: str) -> Ask:
    from langgraph.pregel.remote import RemoteGraph

    remote = RemoteGraph("maestro", url=url)

    def ask(question: str, settings: dict[str, Any]) -> Outcome:
        out = remote.invoke({"question": question, "images": [CIRCLES]}, context=settings)
        return Outcome(out.get("answer"), [s["skill"] for s in out.get("steps", [])], out["stop_reason"])

    return ask


def _check_every_setting(ask: Ask) -> None:
    """The settings matrix for one door: each setting changes what the run does, as the local graph's context
    does."""
    answered = ask(COUNT, {})
    assert answered.answer == "7" and answered.stop_reason == "policy"
    withheld = ask(COUNT, {"min_confidence": 0.995})
    assert withheld.answer is None and withheld.stop_reason.startswith("low confidence"), withheld
    assert len(ask(TITLE, {}).skills) >= 2  # so the budgets below are what stops it
    assert len(ask(TITLE, {"max_turns": 1}).skills) == 1
    assert len(ask(TITLE, {"max_cost": 0.01}).skills) <= 1  # no pair costs that little
    assert ask(SIGN, {}).skills[0] != "text-reading"
    assert ask(SIGN, {"policy": "rules"}).skills[0] == "text-reading"


@pytest.mark.slow
def test_the_openai_door_honours_every_setting(base_url):
    _check_every_setting(_openai(base_url))


@pytest.mark.slow
def test_langserve_honours_every_setting(base_url):
    _check_every_setting(_langserve(base_url))


@pytest.mark.slow
def test_the_local_agent_honours_every_setting(registry):
    catalog = PolicyCatalog.parse(("neural", "rules"), default="neural")
    _check_every_setting(_agent(embedded.build_agent(build_graph(registry, catalog.get(), policies=catalog))))


@pytest.mark.slow
def test_remote_agent_and_remote_graph_honour_every_setting(agent_server):
    """`remote_agent` used to drop Maestro's settings: min_confidence=0.995 answered, max_turns=1 made 3 calls."""
    _check_every_setting(_agent(embedded.remote_agent(agent_server)))
    _check_every_setting(_remote_graph(agent_server))


BAD_SETTINGS = [
    ("min_confidence", -1), ("min_confidence", 2), ("min_confidence", "abc"), ("min_confidence", "0.5"),
    ("min_confidence", True), ("max_turns", 0), ("max_turns", 1e9), ("max_turns", 65), ("max_turns", "3"),
    ("max_turns", 2.5), ("max_cost", -1), ("max_cost", 1e300), ("max_cost", "abc"), ("policy", 3),
    ("policy", "not-offered"),
]
"""Values the official clients send as written (they cannot send NaN or Infinity: the next test sends those)."""


@pytest.mark.parametrize(("name", "value"), BAD_SETTINGS, ids=[f"{n}={v!r}" for n, v in BAD_SETTINGS])
def test_a_bad_setting_is_a_400_on_the_openai_door(base_url, name, value):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="maestro", messages=[{"role": "user", "content": COUNT}],
                                       extra_body={name: value})
    error = refused.value.body
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == name and name in error["message"]


@pytest.mark.parametrize(("name", "value"), BAD_SETTINGS, ids=[f"{n}={v!r}" for n, v in BAD_SETTINGS])
def test_a_bad_setting_is_a_400_on_langserve(base_url, name, value):
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/")
    with pytest.raises(httpx.HTTPStatusError) as refused:
        remote.invoke({"question": COUNT, "images": [CIRCLES], name: value})
    assert refused.value.response.status_code == 400
    error = refused.value.response.json()["error"]
    assert error["type"] == "invalid_request_error" and name in error["param"] and name in error["message"]


@pytest.mark.parametrize(("name", "written"), [("max_cost", "1e99999"), ("max_cost", "Infinity"),
                                              ("min_confidence", "NaN"), ("min_confidence", "-Infinity")])
def test_nan_and_infinite_settings_are_a_400_on_both_doors(base_url, name, written):
    """Python's JSON reader takes `NaN`, `Infinity` and `1e99999` (as infinity), which a client's JSON encoder may
    write (Python's does): a 400 naming the field, never a budget without limit or a floor that compares false."""
    for path, body in [("/v1/chat/completions", '{"model": "maestro", "messages": [{"role": "user", "content": "x"}], '
                                                f'"{name}": {written}}}'),
                       ("/maestro/invoke", f'{{"input": {{"question": "x", "images": ["{CIRCLES}"], '
                                           f'"{name}": {written}}}}}')]:
        reply = httpx.post(f"{base_url}{path}", content=body, headers={"Content-Type": "application/json"})
        error = reply.json()["error"]
        assert reply.status_code == 400 and name in error["param"] and "finite" in error["message"], reply.text


def test_unknown_body_fields_are_refused_and_openais_own_are_accepted(base_url):
    """As OpenAI does: a field it does not know is a 400 naming it (a misspelt `min_confidance` must not be
    ignored), while OpenAI's own parameters that do not apply to an episode (`temperature`, `user`...) are
    accepted."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="maestro", messages=[{"role": "user", "content": COUNT}],
                                       extra_body={"min_confidance": 0.9})
    assert refused.value.body["code"] == "unknown_parameter" and refused.value.body["param"] == "min_confidance"
    assert "Unrecognized request argument supplied: min_confidance" in refused.value.body["message"]
    reply = client.chat.completions.create(
        model="maestro", temperature=0.2, top_p=0.9, user="u-1", seed=3, max_tokens=20, stop=["\n"],
        messages=[{"role": "user", "content": [{"type": "text", "text": COUNT},
                                               {"type": "image_url", "image_url": {"url": CIRCLES}}]}])
    assert reply.choices[0].message.content == "7"
    from langserve import RemoteRunnable

    with pytest.raises(httpx.HTTPStatusError) as unknown:
        RemoteRunnable(f"{base_url}/maestro/").invoke({"question": COUNT, "images": [CIRCLES], "temperature": 0})
    assert unknown.value.response.status_code == 400
    assert unknown.value.response.json()["error"]["param"].endswith("temperature")
