"""Small text inside a large, busy image: a short code or word printed in a few pixels somewhere in a large noisy
picture full of shapes, so that reading it needs a zoomed-in look."""

from __future__ import annotations

import random
import string

import numpy as np
from PIL import Image, ImageDraw

from .base import Draft, ask, font

_WORDS = ("harbor", "violet", "copper", "lantern", "meadow", "falcon", "orbit", "cobalt", "saffron", "glacier",
          "pepper", "tundra", "marble", "quartz", "willow", "ember")

QUESTIONS: dict[str, tuple[str, ...]] = {
    "code": (
        "What is the code written in small print in this image?",
        "Somewhere in the picture a short code is printed. What is it?",
        "Read the tiny text in the image. What does it say?",
    ),
    "word": (
        "Which word is written in small letters somewhere in the image?",
        "There is a small word hidden in this picture. What is the word?",
        "What does the small text in the image say?",
    ),
}


def _code(rng: random.Random) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(rng.randint(2, 3)))
    digits = "".join(rng.choice(string.digits) for _ in range(rng.randint(2, 4)))
    return rng.choice((f"{letters}-{digits}", f"{letters}{digits}", f"{digits}{letters}"))


def make(rng: random.Random) -> Draft:
    qtype = rng.choice(("code", "word"))
    text = _code(rng) if qtype == "code" else rng.choice(_WORDS)
    width, height = rng.choice(((1600, 1200), (2000, 1500), (2400, 1600), (1800, 1800)))
    noise_rng = np.random.default_rng(rng.getrandbits(32))
    base = noise_rng.integers(120, 255, size=3)
    # blotchy texture: noise drawn at a quarter of the size and enlarged, plus fine grain
    coarse = base + noise_rng.normal(0, rng.uniform(10, 35), (height // 4, width // 4, 3))
    image = Image.fromarray(np.clip(coarse, 0, 255).astype(np.uint8)).resize((width, height), Image.Resampling.BILINEAR)
    grain = noise_rng.normal(0, rng.uniform(2, 8), (height, width, 3))
    image = Image.fromarray(np.clip(np.asarray(image, dtype=np.float32) + grain, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(20, 80)):  # clutter: shapes of every colour and size, never over the text
        x, y, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(10, 120)
        color = tuple(rng.randint(0, 255) for _ in range(3))
        box = (x - r, y - r * rng.uniform(0.3, 1.0), x + r, y + r * rng.uniform(0.3, 1.0))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=color)
    face = font(rng, rng.randint(11, 18))
    tw, th = face.getlength(text), face.size
    pad = 6
    x = rng.uniform(pad + 20, width - tw - pad - 20)
    y = rng.uniform(pad + 20, height - th - pad - 20)
    paper = tuple(rng.randint(225, 255) for _ in range(3))
    draw.rectangle((x - pad, y - pad, x + tw + pad, y + th + pad), fill=paper)
    draw.text((x, y), text, fill=tuple(rng.randint(0, 60) for _ in range(3)), font=face)
    return Draft(ask(rng, QUESTIONS[qtype], "text"), text, "text", qtype, [image])
