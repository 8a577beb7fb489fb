"""The one procedure by which a `vision-chat` model (a vision-language model behind an OpenAI-compatible endpoint)
carries out any skill: the skill is what the model is told, the model does the seeing.

A skill that declares `or-requires: "vision-chat"` (registry.skills) pairs with every vision-chat card; the registry
runs such a pair through `ask`, never through the skill's code, so the CPU pairs of the skill stay what they were
(same code, same hash, same profile). A skill of its own for vision-chat models (`visual-qa`) calls `ask` from its
entry, and a skill whose steps choose crops or zooms passes them as `images`.

What goes out: the SKILL.md body as the system message, the conversation so far as text turns, then one user message
with the images as `image_url` parts (PNG data URLs, downscaled to the card's `max_input_side`; JPEG when the PNG is
above the card's `max_image_bytes`; refused with `ImageTooLarge` when even that is) and the question, its options
labelled A, B, C... and what form the reply must take. A card that gives its served model's context (`max_model_len`)
and image arithmetic (`image_tokens`) has each request counted before it is sent (registry.image_budget): images that
would not fit beside the text and the reply are downscaled until they do, and a request that cannot fit even so is
refused with `TokenBudgetExceeded`, naming the counts and the fields. What comes back is parsed into the answer form the
question asks for (answer_forms.expected_form): the option for options, Yes/No, a number without its units, else a short
text. Cost, timeout, concurrency, retries and the breaker are the card's, through the expert handle like every call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PIL import Image

from ..answer_forms import Form, expected_form
from ..choices import question_stem
from ..digests import cache_key
from ..errors import ExpertRejected
from ..images.load import FittedImage, fitted_data_url
from ..numbers import numbers_in, parse_number
from ..scoring import letters_only, normalize_text, option_labels, yes_no_in
from ..types import SkillResult, Turn
from .config import ModelCard, OpenAIBackend
from .image_budget import Budget, fitted_side, image_tokens, request_spec, text_tokens
from .skills import SkillSpec

if TYPE_CHECKING:
    from .context import SkillContext

__all__ = ["VISION_CHAT", "DEFAULT_MAX_SIDE", "DEFAULT_MAX_IMAGE_BYTES", "CONFIDENCE", "FORM_INSTRUCTIONS",
           "ImageTooLarge", "TokenBudgetExceeded", "TooManyImages", "ask", "encode_image", "fit_budget", "parse_reply",
           "procedure_hash", "vision_messages"]

VISION_CHAT = "vision-chat"
DEFAULT_MAX_SIDE = 1536
"""Longest image side sent to a card that gives no `max_input_side` (a 1536x1162 chart is 2,312 tokens to
Qwen2.5-VL and 1,730 to Qwen3-VL by their processors' arithmetic; a card's `image_tokens` and `max_model_len` make
each request counted before it is sent)."""
DEFAULT_MAX_IMAGE_BYTES = 8_000_000
"""Largest encoded image sent to a card that gives no `max_image_bytes` (hosted APIs take 10-20 MB per image)."""
CONFIDENCE = 0.5
"""A vision-language model's answer, parsed into the asked form: its own certainty is not reported, so the policy
leans on the pair's measured profile instead."""
MAX_EVIDENCE_CHARS = 300
MAX_TURN_CHARS = 300
"""Each earlier question and answer of the conversation is cut to this many characters."""
FORM_INSTRUCTIONS: dict[Form, str] = {
    "choice": "Reply with the letter of the correct option only.",
    "yesno": "Reply with Yes or No only.",
    "number": "Reply with the number only, without units.",
    "text": "Reply with a short answer only: a word, a name, a number or a short phrase.",
}
"""The last line of the user message: the form the reply must take."""

_ANSWER_IS_RE = re.compile(r"\b(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.I | re.S)
_PAIR_SHAPE_RE = re.compile(r"\(?\s*,\s*\)?")
"""What a pair's text is besides its two numbers: "(3, 4)", "3,4"."""


class ImageTooLarge(ExpertRejected):
    """An image is above what the card says its model takes, even downscaled and as JPEG: refused before sending
    (the request's size against the model's limit; the model is not at fault and its breaker does not move)."""


class TokenBudgetExceeded(ExpertRejected):
    """A request whose images, text and reply cannot fit the served model's context even with the images at the
    processor's smallest size: refused before sending (the endpoint would answer 400)."""


class TooManyImages(ExpertRejected):
    """A question with more images than the card's `max_images` (the server's `--limit-mm-per-prompt`): refused
    before sending, as the server would refuse it."""


@lru_cache(maxsize=1)
def _procedure_source_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def procedure_hash(card: ModelCard, skill: SkillSpec) -> str:
    """What a pair's outcome depends on in code: the skill's code hash when the pair runs the skill's code; the
    SKILL.md and this procedure when it runs here (the skill's code is not run, so changing it changes nothing)."""
    if not skill.by_instructions(card.capabilities):
        return skill.code_hash
    instructions = hashlib.sha256(skill.skill_md.read_bytes()).hexdigest()
    return cache_key("vision-chat", instructions, _procedure_source_hash())[:16]


def encode_image(image: Image.Image, card: ModelCard, which: str = "image", max_side: int | None = None
                 ) -> FittedImage:
    """The data URL sent for one image and its size, within the card's limits (`images.load.fitted_data_url`;
    `max_side` lowers the card's); ImageTooLarge (naming the image, its size and the card's field) when even JPEG is
    over them."""
    limit = card.max_image_bytes or DEFAULT_MAX_IMAGE_BYTES
    fitted = fitted_data_url(image, max_side or card.max_input_side or DEFAULT_MAX_SIDE, limit)
    if fitted.url is None:
        raise ImageTooLarge(f"{which} ({image.width}x{image.height}, sent at {fitted.size[0]}x{fitted.size[1]}) is "
                            f"{fitted.encoded_bytes:,} bytes even as JPEG, above model {card.name!r}'s "
                            f"max_image_bytes {limit:,}; lower the card's max_input_side or raise its max_image_bytes")
    return fitted


def fit_budget(card: ModelCard, images: Sequence[Image.Image], text: str) -> list[FittedImage]:
    """The images as sent, downscaled where the request (images, `text` and the reply's `max_tokens`) would not fit
    the card's `max_model_len` by its `image_tokens` arithmetic; TokenBudgetExceeded when it cannot fit. Without
    both fields, the images within the card's other limits."""
    if card.max_images is not None and len(images) > card.max_images:
        raise TooManyImages(f"model {card.name!r} takes at most {card.max_images} images a request (its card's "
                            f"max_images) and this question has {len(images)}; send fewer images")
    names = [f"image {i + 1}" for i in range(len(images))]
    fitted = [encode_image(image, card, name) for image, name in zip(images, names)]
    spec, limit = card.image_tokens, card.max_model_len
    if spec is None or limit is None or not images:
        return fitted
    if isinstance(card.backend, OpenAIBackend):  # a served model: its reply's tokens and its request's settings count
        reply, spec = card.backend.max_tokens, request_spec(spec, card.backend.extra_body or {})
    else:
        reply = 0
    budget = Budget(limit, text_tokens(text), reply, tuple(image_tokens(*f.size, spec) for f in fitted))
    if budget.fits:
        return fitted
    sides = [fitted_side(*f.size, spec, budget.per_image) for f in fitted]
    if any(side is None for side in sides):
        raise TokenBudgetExceeded(f"model {card.name!r}: {budget.describe([f.size for f in fitted])}, and "
                                  f"{budget.shortfall()}; raise the card's max_model_len (and the server's "
                                  "--max-model-len), lower its max_tokens or send fewer images")
    return [encode_image(image, card, name, max_side=side) if side < max(f.size) else f
            for image, name, f, side in zip(images, names, fitted, cast(list[int], sides))]  # no None: checked above


def _user_text(question: str, choices: Sequence[str] | None) -> str:
    form = expected_form(question, choices)
    if not choices or letters_only(choices):
        lines = [f"Question: {question.strip()}"]
    else:
        lines = [f"Question: {question_stem(question).strip()}", "Options:",
                 *(f"{label}. {option}" for label, option in zip(option_labels(choices), choices))]
    return "\n".join([*lines, FORM_INSTRUCTIONS[form]])


def vision_messages(instructions: str, question: str, choices: Sequence[str] | None, image_urls: Sequence[str],
                    history: Sequence[Turn] = ()) -> list[dict]:
    """The OpenAI chat messages of one call: the skill's instructions, the conversation so far, then the images
    and the question."""
    earlier: list[dict] = []
    for turn in history:
        earlier.append({"role": "user", "content": f"Question: {turn['question'][:MAX_TURN_CHARS]}"})
        answer = turn.get("answer")
        if answer:
            earlier.append({"role": "assistant", "content": answer[:MAX_TURN_CHARS]})
    content = [*({"type": "image_url", "image_url": {"url": url}} for url in image_urls),
               {"type": "text", "text": _user_text(question, choices)}]
    return [{"role": "system", "content": instructions}, *earlier, {"role": "user", "content": content}]


def _stated(reply: str) -> str:
    """The part of a reply that states the answer: after "the answer is" when it says so, else its first line."""
    said = _ANSWER_IS_RE.search(reply)
    text = said.group(1) if said else reply
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _option(reply: str, stated: str, choices: Sequence[str]) -> str | None:
    """The option a reply names: by its label standing alone (the stated part first), else the only option whose
    text it contains."""
    labels = option_labels(choices)
    bare = stated.strip("()[].:*` ").upper()
    if bare in labels:
        return choices[labels.index(bare)]
    alternatives = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    label_re = re.compile(rf"(?:^|[\s(\[*])({alternatives})(?:[)\].:,*]|\s|$)")
    match = label_re.search(stated) or label_re.search(reply)
    if match:
        return choices[labels.index(match.group(1))]
    text = normalize_text(reply)
    named = [c for c in choices if len(normalize_text(c)) > 1 and normalize_text(c) in text]
    return named[0] if len(named) == 1 else None


def _number_text(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def parse_reply(reply: str, question: str, choices: Sequence[str] | None) -> str | None:
    """The answer a reply gives, in the form the question asks for: an option's text (its letter when the options
    are letters), "Yes"/"No", a number without units (or a pair "(a,b)"), else the stated text; None when the reply
    does not give one in that form."""
    stated = _stated(reply)
    form = expected_form(question, choices)
    if form == "choice":
        return _option(reply, stated, choices or [])
    if form == "yesno":
        found = yes_no_in(stated) or yes_no_in(reply)
        return None if found is None else found.capitalize()
    cleaned = stated.strip().rstrip(".").strip("*`\"' ")
    if form == "number":
        pair = numbers_in(cleaned, grouped=False)
        if len(pair) == 2 and _PAIR_SHAPE_RE.fullmatch((cleaned[:pair[0].start] + cleaned[pair[0].end:pair[1].start]
                                                        + cleaned[pair[1].end:]).strip()):
            return f"({_number_text(float(pair[0].value))},{_number_text(float(pair[1].value))})"
        value = parse_number(cleaned)
        value = parse_number(reply) if value is None else value
        return None if value is None else _number_text(value)
    return cleaned or None


def ask(ctx: SkillContext, images: Sequence[Image.Image] | None = None) -> SkillResult:
    """Carry out `ctx.skill` on `ctx.model` (a vision-chat model): its instructions, the question, the options and
    `images` (default: the episode's images, whole; none for a question without one) go out, the reply comes back
    as the answer in the question's form."""
    if images is None:
        images = ctx.images if ctx.image_refs else []
    text_only = vision_messages(ctx.instructions, ctx.request, ctx.choices, [], ctx.history)
    fitted = fit_budget(ctx.model.card, images, json.dumps(text_only))
    messages = vision_messages(ctx.instructions, ctx.request, ctx.choices, [f.url or "" for f in fitted],
                               ctx.history)
    reply = ctx.model.chat(messages).text
    answer = parse_reply(reply, ctx.request, ctx.choices)
    sizes = ", ".join(f"{image.width}x{image.height}" + (f" sent at {f.size[0]}x{f.size[1]}" if f.size !=
                                                         image.size else "")
                      for image, f in zip(images, fitted)) or "no image"
    evidence = f"{ctx.model.name} ({ctx.skill.name} instructions, {sizes}) replied: {reply[:MAX_EVIDENCE_CHARS]!r}"
    return SkillResult(evidence=evidence, answer=answer, confidence=CONFIDENCE if answer else 0.0)
