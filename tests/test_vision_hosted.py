"""Hosted APIs as they are in 2026, and requests counted against the served model's context before they are sent.

The shipped reasoning-class card (configs/registry-vlm.yaml) answers through VisionEndpointDouble
(tests/vision_double.py) given a scripted refusal, written here, of what OpenAI documents its reasoning models refuse
(400 on `max_tokens`, on a temperature other than the default, on an unknown field) and a scripted `usage` with hidden
reasoning tokens: no hosted API can be called from the suite. The image token arithmetic is checked against the model's
own image processor (transformers' Qwen2-VL processor, which Qwen2.5-VL and Qwen3-VL use), and a request above a card's
`max_model_len` goes with smaller images or is refused by name before anything is sent; the same arithmetic and budget
against real vLLM's own count are tests/test_vllm_vision.py's."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw
from vision_double import VisionEndpointDouble

from maestro_graph.errors import ConfigError
from maestro_graph.registry import Registry
from maestro_graph.registry.config import ImageTokens
from maestro_graph.registry.image_budget import image_tokens
from maestro_graph.types import ErrorKind, Invoke

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "skills"
QWEN25 = ImageTokens(patch_size=14, merge_size=2, min_pixels=3136, max_pixels=12845056)
QWEN3 = ImageTokens(patch_size=16, merge_size=2, min_pixels=65536, max_pixels=16777216)
LOWERED = ImageTokens(patch_size=14, merge_size=2, min_pixels=3136, max_pixels=28 * 28 * 256)
"""Qwen2.5-VL served with `--mm-processor-kwargs '{"max_pixels": 200704}'`."""
REASONING_FIELDS = frozenset({"model", "messages", "max_completion_tokens", "temperature", "reasoning_effort",
                              "response_format", "seed", "n", "user", "metadata", "store", "stream"})
"""The request fields OpenAI's chat completions take for a reasoning model, less the sampling parameters it refuses."""
REASONING_TOKENS = 192
REASONING_USAGE = {"prompt_tokens": 420, "completion_tokens": 1 + REASONING_TOKENS,
                   "completion_tokens_details": {"reasoning_tokens": REASONING_TOKENS}}
"""A reasoning model's `usage`, scripted: the hidden reasoning is counted inside completion_tokens."""


def _openai_reasoning_refusal(body: dict) -> str | None:
    """What OpenAI's API reference says a reasoning model (o-series, GPT-5 class) answers 400 to, in its words; a
    scripted refusal for the double (`refuse`)."""
    if "max_tokens" in body:
        return ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
                "instead.")
    if "temperature" in body and body["temperature"] != 1:
        return (f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. Only the "
                "default (1) value is supported.")
    unknown = sorted(set(body) - REASONING_FIELDS)
    return f"Unrecognized request argument supplied: {unknown[0]}" if unknown else None


def _shipped_card(shipped: str, url: str, model: str, **changes) -> dict:
    """A card of configs/registry-vlm.yaml as shipped, pointed at `url` serving `model`."""
    cards = yaml.safe_load((ROOT / "configs" / "registry-vlm.yaml").read_text())["models"]
    card = next(c for c in cards if c["name"] == shipped)
    card["backend"] = {**card["backend"], "base_url": url, "model": model, "api_key_env": None}
    card.update(changes)
    return card


def _registry(folder: Path, *cards: dict) -> Registry:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(SKILLS)], "models": list(cards)}))
    return Registry.load(path, cache=None)


def _chart(folder: Path, size: tuple[int, int] = (320, 240)) -> Path:
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).rectangle((20, 20, size[0] // 2, size[1] - 20), fill=(40, 90, 200))
    path = folder / f"chart-{size[0]}x{size[1]}.png"
    image.save(path)
    return path


def test_a_reasoning_class_card_answers_through_a_strict_double_that_refuses_the_plain_card(tmp_path):
    chart = _chart(tmp_path)
    with VisionEndpointDouble(model="gpt-5-mini", default="B", refuse=_openai_reasoning_refusal,
                              usage=REASONING_USAGE) as api:
        card = _shipped_card("hosted-reasoning-vlm", api.url, "gpt-5-mini")
        card["backend"]["headers"] = {"OpenAI-Project": "proj_maestro"}
        plain = {**card, "name": "plain", "backend": {**card["backend"], "token_limit_field": "max_tokens",
                                                      "temperature": 0.0}}
        registry = _registry(tmp_path, card, plain)
        question, choices = "Which bar is tallest?", ["first", "second", "third"]
        step = registry.run(Invoke("hosted-reasoning-vlm", "chart-qa"), question=question, images=[str(chart)],
                            choices=choices)
        assert step.error is None, step.error
        assert step.answer == "second"
        (received,) = api.requests
        body = received.body
        assert body["max_completion_tokens"] == 4096 and "max_tokens" not in body and "temperature" not in body
        assert body["reasoning_effort"] == "low"
        assert [p["image_url"]["detail"] for p in body["messages"][-1]["content"] if p["type"] == "image_url"] == [
            "high"]
        assert received.headers["openai-project"] == "proj_maestro"
        (call,) = step.calls  # the hidden reasoning is in completion_tokens, and charged
        assert (call["prompt_tokens"], call["completion_tokens"]) == (420, 1 + REASONING_TOKENS)
        cost = card["cost"]
        assert step.cost == pytest.approx(cost["per_call"] + cost["per_1k_tokens"] * (
            call["prompt_tokens"] + call["completion_tokens"]) / 1000)
        refused = registry.run(Invoke("plain", "chart-qa"), question=question, images=[str(chart)], choices=choices)
        assert refused.error_kind == ErrorKind.EXPERT and "HTTP 400" in refused.error
        assert "max_completion_tokens" in refused.error  # the server's own message, quoted
        assert len(api.requests) == 1  # the double refused it


@pytest.mark.parametrize("field, value, problem", [
    ("extra_body", {"max_tokens": 10}, "set by Maestro"),
    ("headers", {"Authorization": "Bearer sk-x"}, "api_key_env"),
    ("image_detail", "ultra", "image_detail"),
    ("token_limit_field", "max_output_tokens", "token_limit_field"),
])
def test_a_bad_hosted_option_is_a_config_error_naming_it(tmp_path, field, value, problem):
    card = _shipped_card("hosted-reasoning-vlm", "http://127.0.0.1:9/v1", "m")
    card["backend"][field] = value
    with pytest.raises(ConfigError, match=problem) as caught:
        _registry(tmp_path, card)
    assert field in str(caught.value)


@pytest.mark.parametrize("spec", [QWEN25, QWEN3, LOWERED], ids=["qwen2.5-vl", "qwen3-vl", "lowered-max-pixels"])
def test_image_tokens_are_the_model_processors_own_count(spec):
    """The count the card's arithmetic gives is what the image processor of transformers makes of the image."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(patch_size=spec.patch_size, merge_size=spec.merge_size,
                                         min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    for size in [(1536, 1162), (641, 479), (60, 900), (20, 20)]:
        grid = processor(images=[Image.new("RGB", size)], return_tensors="np")["image_grid_thw"][0]
        assert image_tokens(*size, spec) == int(np.prod(grid)) // spec.merge_size**2 + spec.extra_tokens, size
    assert image_tokens(1536, 1162, QWEN25) == 2312 and image_tokens(1536, 1162, QWEN3) == 1730


def test_a_request_above_max_model_len_is_sent_smaller_or_refused_by_name(tmp_path):
    """Maestro's side, before sending: the double only records what arrives. That the shrunk request fits vLLM's own
    count, and the refusals' wording, is tests/test_vllm_vision.py's
    test_an_image_past_the_cards_budget_is_shrunk_or_refused_by_name."""
    chart = _chart(tmp_path, (1536, 1162))  # 2,312 tokens to Qwen2.5-VL
    with VisionEndpointDouble(model="qwen", default="7") as double:
        def card(name: str, max_model_len: int) -> dict:
            return _shipped_card("qwen2.5-vl-7b", double.url, "qwen", name=name, max_model_len=max_model_len,
                                 max_input_side=4096, retries={"attempts": 1})
        registry = _registry(tmp_path, card("roomy", 16384), card("tight", 2048), card("tiny", 256))
        asked = {"question": "How many bars are there?", "images": [str(chart)], "choices": None}
        roomy = registry.run(Invoke("roomy", "chart-qa"), **asked)
        assert roomy.error is None and double.requests[-1].images[0].size == (1536, 1162)
        tight = registry.run(Invoke("tight", "chart-qa"), **asked)
        assert tight.error is None and tight.answer == "7"
        sent = double.requests[-1].images[0]
        spent = image_tokens(*sent.size, QWEN25)
        assert sent.width < 1536 and spent + 128 < 2048  # downscaled to fit beside the text and the 128-token reply
        assert "sent at" in tight.evidence
        posts = double.posts
        tiny = registry.run(Invoke("tiny", "chart-qa"), **asked)
        assert tiny.error_kind == ErrorKind.EXPERT and "max_model_len 256" in tiny.error
        assert "image tokens (1536x1162: 2,312)" in tiny.error  # the text and reply alone are over: no negative budget
        assert "the text and the reply alone take 324 of max_model_len 256" in tiny.error
        assert not re.search(r"-\d", tiny.error)
        assert double.posts == posts  # refused before sending
