"""`maestro serve`'s app on real loopback servers (uvicorn in a thread): the `openai` client plain and streaming,
LangServe's RemoteRunnable, every bad input with its status and JSON error body, the episode cap, the
timeout and resuming a thread from its checkpoint."""

from __future__ import annotations

import base64
import functools
import http.server
import io
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
from PIL import Image
from servers import EXAMPLES, SLOW_QUESTION, data_url, slow_registry

from maestro_graph.doors.serve import THREAD_HEADER, ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.registry import Registry

KEY_ENV = "MAESTRO_TEST_SERVE_KEY"
KEY = "test-key-123"
QR_QUESTION = "What text does the QR code encode?"


@pytest.fixture(scope="module")
def image_host():
    """A loopback HTTP server holding the example images: the allow-listed remote host."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def base_url(registry, image_host):
    os.environ[KEY_ENV] = KEY
    settings = ServeSettings(api_key_env=KEY_ENV, policy="rules", max_body_bytes=1_000_000, max_image_bytes=200_000,
                             allowed_image_hosts=(image_host,), request_timeout_s=120)
    with running_app(create_app(registry, settings)) as url:
        yield url
    del os.environ[KEY_ENV]


@pytest.fixture()
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEY, max_retries=0)


def _user(text: str, *urls: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         *({"type": "image_url", "image_url": {"url": u}} for u in urls)]}]


def test_models_and_health(client, base_url):
    assert [m.id for m in client.models.list()] == ["maestro"]
    health = httpx.get(f"{base_url}/healthz").json()
    assert health["status"] == "ok" and health["langserve"] is True and health["persistence"] is False


def test_plain_completion_answers_with_the_step_trace(client):
    reply = client.chat.completions.create(model="maestro",
                                           messages=_user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png")))
    assert reply.choices[0].message.content == "Wikipedia"
    trace = reply.model_extra["maestro"]
    assert trace["stop_reason"] == "policy" and trace["thread_id"] is None
    assert trace["steps"][0]["model"] == "zxing" and trace["steps"][0]["skill"] == "barcode-reading"
    assert trace["cost"] > 0


def test_streaming_sends_steps_then_the_answer(client):
    chunks = list(client.chat.completions.create(
        model="maestro", stream=True, messages=_user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png"))))
    events = [c.model_extra.get("maestro", {}).get("event") for c in chunks]
    assert events.index("decision") < events.index("step") < events.index("answer") < events.index("done")
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == "Wikipedia"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["maestro"]["steps"][0]["answer"] == "Wikipedia"


def test_openai_conventions_usage_model_retrieve_n_and_request_id(client, base_url):
    """What an OpenAI client takes for granted: `usage` (0 tokens here: no chat model ran; the cost rides in
    `maestro`), also as the last streamed chunk when asked; `models.retrieve`; `n>1` refused; `x-request-id`."""
    messages = _user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png"))
    reply = client.chat.completions.create(model="maestro", messages=messages)
    assert reply.usage is not None and reply.usage.total_tokens == 0 and reply.usage.prompt_tokens == 0
    assert reply.model_extra["maestro"]["cost"] > 0
    chunks = list(client.chat.completions.create(model="maestro", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 0
    assert all(c.usage is None for c in chunks[:-1])
    assert client.models.retrieve("maestro").id == "maestro"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-5")
    with pytest.raises(openai.BadRequestError) as many:
        client.chat.completions.create(model="maestro", messages=messages, n=2)
    assert many.value.code == "n_not_supported"
    raw = client.chat.completions.with_raw_response.create(model="maestro", messages=messages,
                                                           extra_headers={"x-request-id": "client-id-1"})
    assert raw.headers["x-request-id"] == "client-id-1"
    made = httpx.get(f"{base_url}/v1/models", headers={**AUTH, "x-request-id": "../" + "x" * 200})
    assert made.headers["x-request-id"].startswith("req-")
    assert httpx.get(f"{base_url}/v1/models").headers["x-request-id"].startswith("req-")  # a 401 has one too


def test_metrics_parse_and_move_after_a_request(client, base_url):
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[tuple[str, tuple], float]:
        text = httpx.get(f"{base_url}/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    before = scrape()
    client.chat.completions.create(model="maestro", messages=_user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png")))
    after = scrape()
    answered = ("maestro_episodes_total", (("outcome", "answered"),))
    zxing = ("maestro_expert_calls_total", (("model", "zxing"),))
    assert after[answered] == before.get(answered, 0) + 1
    assert after[zxing] >= before.get(zxing, 0) + 1
    assert after[("maestro_episode_seconds_count", ())] == before[("maestro_episode_seconds_count", ())] + 1
    assert after[("maestro_decision_seconds_count", ())] > before[("maestro_decision_seconds_count", ())]
    assert after[("maestro_breaker_open", (("model", "zxing"),))] == 0
    assert ("maestro_queue_depth", ()) in after


def test_logs_are_json_lines_with_the_request_id(client):
    import io
    import json
    import logging

    from maestro_graph.doors.serve.observability import JsonLogFormatter

    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("maestro")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        client.chat.completions.create(model="maestro", messages=_user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png")),
                                       extra_headers={"x-request-id": "log-me-1"})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    mine = [line for line in lines if line["request_id"] == "log-me-1"]
    assert any(line["logger"] == "maestro.http" and "/v1/chat/completions 200" in line["message"] for line in mine)
    assert any(line["message"].startswith("episode answered") for line in mine)  # logged on the worker thread
    assert all("thread_id" in line for line in lines)


GUESS = "Is the number of circles seven? Please answer yes or no."
"""The keyword rules count circles (7), no yes/no: the answer is the graph's marked prior guess."""


def test_a_guess_is_marked_with_its_source_and_confidence_on_the_openai_and_langserve_doors(client, base_url):
    """A calling agent tells "the image says no" from "nobody could read it": the `maestro` field
    (plain and at the end of a stream) and LangServe's output carry who gave the answer and how sure it is."""
    from langserve import RemoteRunnable

    circles = data_url(EXAMPLES / "circles.png")
    reply = client.chat.completions.create(model="maestro", messages=_user(GUESS, circles))
    trace = reply.model_extra["maestro"]
    assert reply.choices[0].message.content == "no" and trace["answer_source"] == "guess"
    assert 0 < trace["confidence"] < 1 and trace["steps"][0]["answer"] == "7"
    chunks = client.chat.completions.create(model="maestro", stream=True, messages=_user(GUESS, circles))
    done = [c.model_extra["maestro"] for c in chunks if c.model_extra.get("maestro", {}).get("event") == "done"]
    assert done[0]["answer_source"] == "guess" and done[0]["confidence"] == trace["confidence"]
    counted = client.chat.completions.create(model="maestro", messages=_user("How many circles are there?", circles))
    assert counted.model_extra["maestro"]["answer_source"] == "policy"
    assert counted.model_extra["maestro"]["confidence"] > trace["confidence"]  # a count the expert read is surer

    remote = RemoteRunnable(f"{base_url}/maestro/", headers={"Authorization": f"Bearer {KEY}"})
    out = remote.invoke({"question": GUESS, "images": [circles]})
    assert out["answer"] == "no" and out["answer_source"] == "guess" and out["confidence"] == trace["confidence"]
    schema = httpx.get(f"{base_url}/maestro/output_schema", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert {"answer_source", "confidence"} <= set(schema["properties"])


def test_allow_listed_remote_image_is_fetched(client, image_host):
    reply = client.chat.completions.create(model="maestro", messages=_user(QR_QUESTION, f"http://{image_host}/qrcode.png"))
    assert reply.choices[0].message.content == "Wikipedia"


def test_langserve_remote_runnable(base_url):
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", headers={"Authorization": f"Bearer {KEY}"})
    out = remote.invoke({"question": QR_QUESTION, "images": [data_url(EXAMPLES / "qrcode.png")]})
    assert out["answer"] == "Wikipedia" and out["steps"][0]["model"] == "zxing"
    with pytest.raises(httpx.HTTPStatusError) as refused:
        remote.invoke({"question": QR_QUESTION, "images": ["/etc/passwd"]})
    assert refused.value.response.status_code == 400
    assert refused.value.response.json()["error"]["code"] == "local_path_not_allowed"
    unauthorised = RemoteRunnable(f"{base_url}/maestro/")
    with pytest.raises(httpx.HTTPStatusError) as denied:
        unauthorised.invoke({"question": QR_QUESTION, "images": []})
    assert denied.value.response.status_code == 401


def test_langserve_streams_steps_before_the_answer_and_the_playground_runs(base_url):
    """`stream` sends each step as it happens, then the answer; `stream_log` and `stream_events` (what the
    playground page calls) run an episode; the playground page itself is served."""
    import asyncio

    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", headers={"Authorization": f"Bearer {KEY}"})
    request = {"question": QR_QUESTION, "images": [data_url(EXAMPLES / "qrcode.png")]}
    chunks = list(remote.stream(request))
    first_step = next(i for i, c in enumerate(chunks) if c.get("steps"))
    answered = next(i for i, c in enumerate(chunks) if "answer" in c)
    assert first_step < answered and chunks[answered]["answer"] == "Wikipedia"
    assert chunks[first_step]["steps"][0]["model"] == "zxing"

    async def logged() -> tuple[list, list]:
        patches = [p async for p in remote.astream_log(request)]
        events = [e async for e in remote.astream_events(request, version="v2")]
        return patches, events

    patches, events = asyncio.run(logged())
    final = patches[0]
    for patch in patches[1:]:
        final = final + patch
    assert final.state["final_output"]["answer"] == "Wikipedia"
    streamed = [e for e in events if e["event"] == "on_chain_stream"]
    assert any(e["data"]["chunk"].get("steps") for e in streamed)
    assert events[-1]["event"] == "on_chain_end" and events[-1]["data"]["output"]["answer"] == "Wikipedia"
    page = httpx.get(f"{base_url}/maestro/playground/index.html", headers=AUTH)
    assert page.status_code == 200 and "<html" in page.text.lower()


def _png(size: tuple[int, int], noise: bool) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 255, (*size, 3), dtype=np.uint8) if noise else \
        np.zeros((*size, 3), np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _body(*urls: str, **extra) -> dict:
    return {"model": "maestro", "messages": _user(QR_QUESTION, *urls), **extra}


def _nested(depth: int, frame: str = '{"model": "maestro", "messages": [{"role": "user", "content": %s}]}') -> bytes:
    """A request body with `depth` nested arrays where the content goes."""
    return (frame % ("[" * depth + "]" * depth)).encode()


AUTH = {"Authorization": f"Bearer {KEY}"}
QR = (EXAMPLES / "qrcode.png").read_bytes()

BAD_INPUTS = {
    # name: (method, path, headers, kwargs for httpx, status, error code)
    "missing key": ("POST", "/v1/chat/completions", {}, {"json": _body()}, 401, "invalid_api_key"),
    "wrong key": ("POST", "/v1/chat/completions", {"Authorization": "Bearer nope"}, {"json": _body()}, 401,
                  "invalid_api_key"),
    "wrong key on models": ("GET", "/v1/models", {"Authorization": "Bearer nope"}, {}, 401, "invalid_api_key"),
    "malformed json": ("POST", "/v1/chat/completions", {**AUTH, "Content-Type": "application/json"},
                       {"content": b'{"model": "maestro", "messages": ['}, 400, "invalid_json"),
    "form content type": ("POST", "/v1/chat/completions", AUTH, {"data": {"model": "maestro"}}, 415,
                          "unsupported_media_type"),
    "no messages": ("POST", "/v1/chat/completions", AUTH, {"json": {"model": "maestro"}}, 400, "invalid_request"),
    "unknown model": ("POST", "/v1/chat/completions", AUTH, {"json": {**_body(), "model": "gpt-5"}}, 404,
                      "model_not_found"),
    "audio part": ("POST", "/v1/chat/completions", AUTH,
                   {"json": {"model": "maestro", "messages": [{"role": "user", "content": [
                       {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}},
                   400, "unsupported_content_type"),
    "empty message": ("POST", "/v1/chat/completions", AUTH,
                      {"json": {"model": "maestro", "messages": [{"role": "user", "content": "  "}]}}, 400,
                      "empty_request"),
    "not an image": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(b"hello, not a png"))}, 400,
                     "invalid_image"),
    "truncated image": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR[: len(QR) // 2]))}, 400,
                        "invalid_image"),
    "bad base64": ("POST", "/v1/chat/completions", AUTH, {"json": _body("data:image/png;base64,@@@")}, 400,
                   "invalid_image"),
    "remote host": ("POST", "/v1/chat/completions", AUTH, {"json": _body("https://example.com/cat.png")}, 400,
                    "image_url_not_allowed"),
    "local path": ("POST", "/v1/chat/completions", AUTH, {"json": _body(str(EXAMPLES / "qrcode.png"))}, 400,
                   "local_path_not_allowed"),
    "file url": ("POST", "/v1/chat/completions", AUTH, {"json": _body("file:///etc/passwd")}, 400,
                 "local_path_not_allowed"),
    "oversized body": ("POST", "/v1/chat/completions", AUTH,
                       {"json": _body(_b64(b"x" * 900_000))}, 413, "request_too_large"),
    "oversized chunked body": ("POST", "/v1/chat/completions", {**AUTH, "Content-Type": "application/json"},
                               {"content": iter([b"[" + b" " * 600_000, b" " * 600_000 + b"]"])}, 413,
                               "request_too_large"),
    "oversized image": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(_png((300, 300), True)))}, 413,
                        "image_too_large"),
    "too many images": ("POST", "/v1/chat/completions", AUTH, {"json": _body(*[_b64(QR)] * 9)}, 413,
                        "too_many_images"),
    "thread without checkpoints": ("POST", "/v1/chat/completions", AUTH,
                                   {"json": _body(_b64(QR), thread_id="t1")}, 400, "persistence_disabled"),
    "bad thread header": ("POST", "/v1/chat/completions", {**AUTH, THREAD_HEADER: "../../etc"},
                          {"json": _body(_b64(QR))}, 400, "invalid_thread_id"),
    "n above one": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), n=3)}, 400, "n_not_supported"),
    "unknown model id": ("GET", "/v1/models/gpt-5", AUTH, {}, 404, "model_not_found"),
    "bad policy": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), policy="smart")}, 400,
                   "invalid_policy"),
    "json nested past the stack": ("POST", "/v1/chat/completions", {**AUTH, "Content-Type": "application/json"},
                                   {"content": _nested(100_000)}, 400, "json_too_deep"),
    "json nested past the cap": ("POST", "/v1/chat/completions", {**AUTH, "Content-Type": "application/json"},
                                 {"content": _nested(40)}, 400, "json_too_deep"),
    "too many choices": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), choices=["x"] * 65)}, 400,
                         "invalid_request"),
    "huge choice": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), choices=["x" * 400_000] * 2)},
                    400, "invalid_request"),
    "tools": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}}}])}, 400, "unsupported_parameter"),
    "json output": ("POST", "/v1/chat/completions", AUTH, {"json": _body(_b64(QR), response_format={
        "type": "json_object"})}, 400, "unsupported_parameter"),
    "langserve nested json": ("POST", "/maestro/invoke", {**AUTH, "Content-Type": "application/json"},
                              {"content": _nested(100_000, '{"input": %s}')}, 400, "json_too_deep"),
    "langserve nested stream": ("POST", "/maestro/stream", {**AUTH, "Content-Type": "application/json"},
                                {"content": _nested(100_000, '{"input": %s}')}, 400, "json_too_deep"),
    "langserve huge choice": ("POST", "/maestro/invoke", AUTH, {"json": {"input": {
        "question": QR_QUESTION, "images": [_b64(QR)], "choices": ["x" * 400_000] * 2}}}, 400, "invalid_request"),
    "langserve no images": ("POST", "/maestro/invoke", AUTH, {"json": {"input": {"question": QR_QUESTION}}}, 400,
                            "invalid_request"),
    "langserve question too long": ("POST", "/maestro/invoke", AUTH, {"json": {"input": {
        "question": "x" * 4001, "images": [_b64(QR)]}}}, 400, "invalid_request"),
    "langserve batch input invalid": ("POST", "/maestro/batch", AUTH, {"json": {"inputs": [
        {"question": QR_QUESTION}]}}, 400, "invalid_request"),
    **{f"langserve {route} refused policy": ("POST", f"/maestro/{route}", AUTH, {"json": {"input": {
        "question": QR_QUESTION, "images": [_b64(QR)], "policy": "smart"}}}, 400, "invalid_policy")
       for route in ("stream", "stream_log", "stream_events")},
    **{f"langserve {route} refused image": ("POST", f"/maestro/{route}", AUTH, {"json": {"input": {
        "question": QR_QUESTION, "images": ["/etc/passwd"]}}}, 400, "local_path_not_allowed")
       for route in ("stream", "stream_log", "stream_events")},
    "wrong method": ("GET", "/v1/chat/completions", AUTH, {}, 405, "http_405"),
    "unknown path": ("GET", "/v2/nothing", AUTH, {}, 404, "http_404"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gets_status_and_json_error_and_server_keeps_serving(base_url, case):
    method, path, headers, kwargs, status, code = BAD_INPUTS[case]
    response = httpx.request(method, f"{base_url}{path}", headers=headers, timeout=60, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"] and error["type"]
    assert httpx.get(f"{base_url}/v1/models", headers=AUTH).status_code == 200


def test_a_refused_batch_starts_no_episode(base_url):
    """A batch above the episode cap, or with one refused input, is refused before any episode starts, and the
    next client is served (before: 64 of 100 episodes kept running and the next client got a 429 too)."""
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{base_url}/maestro/", headers=AUTH)
    good = {"question": QR_QUESTION, "images": [_b64(QR)]}
    for inputs, status in (([good] * 100, 413), ([good] * 3 + [{**good, "images": ["/etc/passwd"]}], 400)):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            remote.batch(inputs)
        assert refused.value.response.status_code == status
        assert httpx.get(f"{base_url}/healthz").json()["episodes_in_flight"] == 0
    assert [out["answer"] for out in remote.batch([good] * 3)] == ["Wikipedia"] * 3


def test_openai_tools_and_json_output_are_refused_not_ignored(client, base_url):
    """`tools` and `response_format` would be ignored and the client would fail to parse a plain answer; both are
    refused with OpenAI's 400 shape, through the `openai` client and LangChain's ChatOpenAI."""
    messages = _user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png"))
    with pytest.raises(openai.BadRequestError) as json_mode:
        client.chat.completions.create(model="maestro", messages=messages, response_format={"type": "json_object"})
    assert json_mode.value.code == "unsupported_parameter" and json_mode.value.param == "response_format"
    assert json_mode.value.type == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as tools:
        client.chat.completions.create(model="maestro", messages=messages, tool_choice="auto", tools=[
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}])
    assert tools.value.code == "unsupported_parameter" and tools.value.param == "tools"
    plain = client.chat.completions.create(model="maestro", messages=messages, tool_choice="none",
                                           response_format={"type": "text"})
    assert plain.choices[0].message.content == "Wikipedia"

    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Reading(BaseModel):
        text: str

    chat = ChatOpenAI(model="maestro", base_url=f"{base_url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="response_format` is not supported"):
        chat.with_structured_output(Reading).invoke([{"role": "user", "content": messages[0]["content"]}])
    assert chat.invoke([{"role": "user", "content": messages[0]["content"]}]).content == "Wikipedia"


def test_openai_client_raises_typed_errors(base_url, client):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="maestro", messages=_user(QR_QUESTION, "http://example.com/a.png"))
    assert bad.value.code == "image_url_not_allowed"
    assert client.chat.completions.create(
        model="maestro", messages=_user(QR_QUESTION, data_url(EXAMPLES / "qrcode.png"))).choices[0].message.content \
        == "Wikipedia"


def _wait_idle(url: str) -> None:
    deadline = time.time() + 30
    while httpx.get(f"{url}/healthz").json()["episodes_in_flight"] and time.time() < deadline:
        time.sleep(0.05)


@pytest.mark.slow
def test_timeout_cancels_the_episode_cap_and_resume_from_checkpoint(tmp_path):
    """One worker, one slot, a 1.5 s timeout, checkpoints, and an episode whose second step takes 3 s: the 504
    cancels the episode at once (the worker does not sit out the step), and the thread resumes later from its
    last checkpoint on a server with a longer timeout, without running the finished step again."""
    registry_file, db = slow_registry(tmp_path, delay_s=3.0), tmp_path / "ckpt.sqlite"
    body = {"model": "maestro", "messages": _user(SLOW_QUESTION, data_url(EXAMPLES / "circles.png"))}
    settings = ServeSettings(policy="rules", max_episodes=1, workers=1, request_timeout_s=1.5, checkpoint_db=db)
    with running_app(create_app(Registry.load(registry_file), settings)) as url:
        post = functools.partial(httpx.post, f"{url}/v1/chat/completions", timeout=30)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(post, json={**body, "thread_id": "t-slow"})
            while not httpx.get(f"{url}/healthz").json()["episodes_in_flight"]:
                time.sleep(0.02)
            busy = post(json={**body, "thread_id": "t-slow"})
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
            full = post(json=body)
            assert full.status_code == 429 and full.json()["error"]["code"] == "too_many_episodes"
            first = pending.result()
        assert first.status_code == 504 and first.json()["error"]["code"] == "timeout"
        assert first.headers[THREAD_HEADER] == "t-slow"
        gave_up = time.perf_counter()
        _wait_idle(url)
        assert time.perf_counter() - gave_up < 1.0  # cancelled, not left running for the rest of the 3 s step
        history = httpx.get(f"{url}/v1/threads/t-slow").json()
        assert history["finished"] is False and [s["model"] for s in history["steps"]] == ["crashing-ocr"]
        done_before = history["steps"]

    patient = settings.model_copy(update={"request_timeout_s": 60.0})
    with running_app(create_app(Registry.load(registry_file), patient)) as url:
        post = functools.partial(httpx.post, f"{url}/v1/chat/completions", timeout=60)
        retry = post(json=body, headers={THREAD_HEADER: "t-slow"})  # the work of the timed-out request is kept
        assert retry.status_code == 200, retry.text
        trace = retry.json()["maestro"]
        assert trace["resumed"] is True and trace["stop_reason"] == "policy"
        assert trace["steps"][: len(done_before)] == done_before  # nothing re-run, nothing lost
        assert [s["model"] for s in trace["steps"]] == ["crashing-ocr", "slow-ocr"]
        assert retry.json()["choices"][0]["message"]["content"] == "late"

        replay = post(json={**body, "thread_id": "t-slow"})
        assert replay.json()["maestro"]["replayed"] is True and replay.json()["maestro"]["steps"] == trace["steps"]
        # another question on the finished thread: a new episode, the earlier one kept in the thread's history
        other = post(json={**body, "messages": _user("Another question?", data_url(EXAMPLES / "circles.png")),
                           "thread_id": "t-slow"})
        assert other.status_code == 200, other.text
        assert other.json()["maestro"]["replayed"] is False and other.json()["maestro"]["resumed"] is False
        history = httpx.get(f"{url}/v1/threads/t-slow").json()
        assert history["finished"] is True and history["question"] == "Another question?"
        assert [e["question"] for e in history["episodes"]] == [SLOW_QUESTION, "Another question?"]
        assert history["episodes"][0]["steps"] == trace["steps"]
        assert httpx.get(f"{url}/v1/threads/nope").status_code == 404
