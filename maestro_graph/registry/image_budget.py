"""How many tokens a vision-chat request costs the served model, counted before it is sent, so a request that would
not fit the model's context (`max_model_len`) is sent with smaller images or refused by name instead of failing at
the endpoint (vLLM answers 400, and a profile would read the refusals as wrong answers).

The image arithmetic is the model's own image processor's (`smart_resize` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL in
`transformers`): each side rounded to a multiple of `patch_size * merge_size`, the area kept within the processor's
pixel bounds, one token per `merge_size x merge_size` patches, plus the tokens that open and close each image. The
card says which numbers its model uses (`ModelCard.image_tokens`). Text is estimated from its length
(`CHARS_PER_TOKEN`, on the safe side of what BPE tokenizers give English), since the served tokenizer is not here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .config import ImageTokens

__all__ = ["CHARS_PER_TOKEN", "MAX_ASPECT", "Budget", "fitted_side", "image_tokens", "request_spec", "resized",
           "text_tokens"]

CHARS_PER_TOKEN = 3
"""Characters of text counted as one token: BPE tokenizers average about four on English prose, fewer on numbers."""
MAX_ASPECT = 200
"""The processor refuses an image whose long side is above this many times its short side."""


def resized(width: int, height: int, spec: ImageTokens) -> tuple[int, int]:
    """The (width, height) the model's processor resizes an image to (`transformers`' `smart_resize`)."""
    factor = spec.patch_size * spec.merge_size
    if max(width, height) / max(1, min(width, height)) > MAX_ASPECT:
        raise ValueError(f"a {width}x{height} image is more than {MAX_ASPECT} times as long as it is wide")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > spec.max_pixels:
        beta = math.sqrt(height * width / spec.max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < spec.min_pixels:
        beta = math.sqrt(spec.min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def image_tokens(width: int, height: int, spec: ImageTokens) -> int:
    """The prompt tokens one image of this size takes, its opening and closing tokens included."""
    w_bar, h_bar = resized(width, height, spec)
    return (w_bar // spec.patch_size) * (h_bar // spec.patch_size) // spec.merge_size**2 + spec.extra_tokens


def request_spec(spec: ImageTokens, extra_body: Mapping[str, Any]) -> ImageTokens:
    """The arithmetic the server applies to a request that carries `extra_body`: vLLM's per-request
    `mm_processor_kwargs` (`min_pixels`, `max_pixels`, or `size: {shortest_edge, longest_edge}` as pixel counts)
    replace the card's pixel bounds for that request, so a count from the card's values alone would be wrong."""
    kwargs = extra_body.get("mm_processor_kwargs") or {}
    size = kwargs.get("size") or {}
    bounds = {"min_pixels": kwargs.get("min_pixels", size.get("shortest_edge")),
              "max_pixels": kwargs.get("max_pixels", size.get("longest_edge"))}
    changed = {field: int(value) for field, value in bounds.items() if value is not None}
    return ImageTokens.model_validate({**spec.model_dump(), **changed}) if changed else spec


def text_tokens(text: str) -> int:
    """An estimate, on the safe side, of the tokens of `text`."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def fitted_side(width: int, height: int, spec: ImageTokens, tokens: int) -> int | None:
    """The longest side (in steps of a tenth) to downscale an image to so that it takes at most `tokens`; None when
    not even a one-pixel-wide version does (the processor enlarges small images to `min_pixels`)."""
    side = max(width, height)
    while side >= 1:
        scale = side / max(width, height)
        if image_tokens(max(1, round(width * scale)), max(1, round(height * scale)), spec) <= tokens:
            return side
        side = min(side - 1, math.floor(side * 0.9))
    return None


@dataclass(frozen=True)
class Budget:
    """One request's tokens against the served model's context."""

    max_model_len: int
    text: int
    reply: int
    images: tuple[int, ...]

    @property
    def total(self) -> int:
        return self.text + self.reply + sum(self.images)

    @property
    def fits(self) -> bool:
        return self.total <= self.max_model_len

    @property
    def per_image(self) -> int:
        """The tokens each image may take for the request to fit (text and reply first); 0 when they alone do not
        fit."""
        return max(0, self.max_model_len - self.text - self.reply) // max(1, len(self.images))

    def shortfall(self) -> str:
        """Why the images cannot be made to fit, in the request's own figures."""
        if self.text + self.reply >= self.max_model_len:
            return (f"the text and the reply alone take {self.text + self.reply:,} of max_model_len "
                    f"{self.max_model_len:,}, leaving nothing for the images")
        return f"the images cannot be made small enough for {self.per_image:,} tokens each"

    def describe(self, sizes: Sequence[tuple[int, int]]) -> str:
        shown = ", ".join(f"{w}x{h}: {n:,}" for (w, h), n in zip(sizes, self.images))
        return (f"{sum(self.images):,} image tokens ({shown}) + about {self.text:,} text tokens + {self.reply:,} for "
                f"the reply = {self.total:,}, above max_model_len {self.max_model_len:,}")
