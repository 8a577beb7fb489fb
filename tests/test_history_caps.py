"""A chat request's history is held to the per-request limits, through the `openai` client on a
real loopback server: the distinct images of the question and of its history's latest turns count toward
`max_images` together (an image repeated in every turn counts once), turns older than the graph reads are not
verified, the messages are capped, and verifying the images (here: fetching one from a host that answers late)
runs inside the request's deadline, a 504 at it (on LangServe's route too, through its RemoteRunnable). The
histories are built by `maestro reliability`'s history check, which the last test runs as the suite does."""

from __future__ import annotations

import base64
import http.server
import os
import threading
import time

import openai
import pytest
from servers import EXAMPLES, data_url

from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.operations.reliability.conversation import (
    HISTORY_MAX_IMAGES,
    HISTORY_MAX_MESSAGES,
    history_caps,
    history_turns,
    shifted_circles_url,
)
from maestro_graph.operations.reliability.registries import fault_registry
from maestro_graph.operations.reliability.target import Target

MAX_IMAGES = HISTORY_MAX_IMAGES
TIMEOUT_S = 3.0
LATE_S = 20.0


class _LateImageHost(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the example circles, but only after LATE_S seconds."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        time.sleep(LATE_S)
        body = (EXAMPLES / "circles.png").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def late_host():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LateImageHost)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _served(registry, **settings):
    served = running_app(create_app(registry, ServeSettings(policy="rules", max_images=MAX_IMAGES,
                                                            max_messages=HISTORY_MAX_MESSAGES, **settings)))
    url = served.__enter__()
    return served, url, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def client(registry):
    served, _, client = _served(registry, request_timeout_s=120)
    yield client
    served.__exit__(None, None, None)


@pytest.fixture(scope="module")
def hasty(registry, late_host):
    """A server whose requests have TIMEOUT_S, with the late host allow-listed: (base URL, openai client)."""
    served, url, client = _served(registry, request_timeout_s=TIMEOUT_S, allowed_image_hosts=(late_host,),
                                  fetch_timeout_s=LATE_S * 2)
    yield url, client
    served.__exit__(None, None, None)


def _ask(client, history: list[dict], question: str = "How many circles are in the image?"):
    return client.chat.completions.create(model="maestro", messages=[*history, {"role": "user", "content": question}])


def test_distinct_images_across_the_history_count_toward_the_cap(client):
    with pytest.raises(openai.APIStatusError) as refused:
        _ask(client, history_turns([shifted_circles_url(turn) for turn in range(MAX_IMAGES + 1)]))
    assert refused.value.status_code == 413
    assert refused.value.body["code"] == "too_many_images"
    assert refused.value.body["message"].startswith(f"{MAX_IMAGES + 1} distinct images in the question and the latest")


def test_an_image_repeated_in_every_turn_counts_once(client):
    reply = _ask(client, history_turns([data_url(EXAMPLES / "circles.png")] * 8))
    assert reply.choices[0].message.content == "7"


def test_turns_older_than_the_graph_reads_are_not_verified(client):
    """Nine turns of distinct images: the oldest one (a broken image) is beyond the 8 the graph reads, so it is not
    verified and does not count; the follow-up is about the latest turn's image."""
    broken = "data:image/png;base64," + base64.b64encode(b"not a png").decode()
    history = history_turns([broken, *([data_url(EXAMPLES / "circles.png")] * 8)])
    assert _ask(client, history).choices[0].message.content == "7"


def test_a_history_of_too_many_messages_is_refused(client):
    with pytest.raises(openai.APIStatusError) as refused:
        _ask(client, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
             * (HISTORY_MAX_MESSAGES // 2))
    assert refused.value.status_code == 413 and refused.value.body["code"] == "too_many_messages"


def test_verifying_the_images_is_inside_the_request_deadline(hasty, late_host):
    start = time.monotonic()
    with pytest.raises(openai.APIStatusError) as late:
        _ask(hasty[1], history_turns([f"http://{late_host}/circles.png"]))
    took = time.monotonic() - start
    assert late.value.status_code == 504 and late.value.body["code"] == "timeout"
    assert "were not verified within its 3 s" in late.value.body["message"]
    assert took < TIMEOUT_S + 2, f"the 504 came {took:.1f} s after the request, with a {TIMEOUT_S:g} s timeout"


def test_verifying_the_images_is_inside_the_deadline_on_langserve_too(hasty, late_host):
    import httpx
    from langserve import RemoteRunnable

    remote = RemoteRunnable(f"{hasty[0]}/maestro/")
    start = time.monotonic()
    with pytest.raises(httpx.HTTPStatusError) as late:
        remote.invoke({"question": "How many circles are in the image?", "images": [f"http://{late_host}/c.png"]})
    took = time.monotonic() - start
    assert late.value.response.status_code == 504 and late.value.response.json()["error"]["code"] == "timeout"
    assert took < TIMEOUT_S + 2, f"the 504 came {took:.1f} s after the request, with a {TIMEOUT_S:g} s timeout"


@pytest.mark.slow  # waits out the suite's 10 s deadline; the tests above check each case at a 3 s one
def test_the_reliability_suites_history_check_holds(tmp_path):
    """`maestro reliability`'s check, as the suite runs it (on its registry of fast experts): its own server, a
    trickling image host, a 10 s deadline."""
    registry_file = fault_registry(tmp_path, None)
    case = history_caps(Target("", os.getpid(), tmp_path, data_url(EXAMPLES / "qrcode.png"), registry_file))
    assert case.ok, case.detail
