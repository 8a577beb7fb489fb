"""What every domain generator shares: the item draft, question wording, fonts, colours and image degradation.

A generator is a pure function of a `random.Random`: everything it draws (values, wording, fonts, noise) comes from
that one stream, so an item is re-derived exactly from its seed (`maestro bench check` relies on this).
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ....errors import import_extra

__all__ = [
    "Draft", "Domain", "ask", "fmt_num", "font_paths", "font", "pick_colors", "degrade", "figure_to_image",
    "new_figure", "canvas", "COLORS", "NAMES",
]

# Distinct, nameable colours (name -> RGB): questions may name a series or a line by its colour.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40), "blue": (31, 119, 180), "green": (44, 160, 44), "orange": (255, 127, 14),
    "purple": (148, 103, 189), "brown": (140, 86, 75), "pink": (227, 119, 194), "gray": (110, 110, 110),
    "olive": (150, 150, 30), "cyan": (23, 190, 207), "black": (20, 20, 20), "navy": (20, 40, 120),
}
NAMES = ("Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Victor", "Wen", "Yusuf", "Zoe")

# Answer-format instructions appended to some questions of every domain, so the suffix is no cue to the domain.
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "number": ("Answer with a number.", "Give only the number.", "Answer with only the number in numerical format."),
    "text": ("Answer with a single word or phrase.", "Give a short answer.", "Reply briefly."),
    "yesno": ("Please answer Yes or No.", "Answer yes or no.", "Reply with Yes or No."),
    "choice": ("Choose one of the options.", "Pick the correct option.", "Select the best answer."),
    "pair": ("Answer as a pair (a, b).", "Give both numbers as (a, b).", "Reply with two numbers in parentheses."),
}
SUFFIX_PROBABILITY = 0.4


@dataclass
class Draft:
    """One generated item before it is written: the question, the exact answer, and the rendered images."""

    question: str
    answer: str
    answer_type: str
    qtype: str
    images: list[Image.Image] = field(default_factory=list)
    choices: list[str] | None = None
    tolerance: float | None = None


@dataclass(frozen=True)
class Domain:
    """A registered generator: its domain name, its question wordings per question type, and the function."""

    name: str
    questions: dict[str, tuple[str, ...]]
    make: Callable[[random.Random], Draft]


def ask(rng: random.Random, templates: tuple[str, ...], answer_type: str, **fields: object) -> str:
    """One wording of a question (a template filled with `fields`), sometimes followed by a format instruction."""
    text = rng.choice(templates).format(**fields)
    if rng.random() < SUFFIX_PROBABILITY:
        text = f"{text} {rng.choice(_SUFFIXES[answer_type])}"
    return text


def fmt_num(value: float, decimals: int = 2) -> str:
    """An exact answer as text: integers without a point, others rounded to `decimals` without trailing zeros."""
    rounded = round(float(value), decimals)
    if math.isclose(rounded, round(rounded)):
        return str(int(round(rounded)))
    return f"{rounded:.{decimals}f}".rstrip("0").rstrip(".")


@lru_cache(maxsize=1)
def font_paths() -> tuple[str, ...]:
    """TrueType fonts available here: every TTF under /usr/share/fonts, then matplotlib's bundled DejaVu fonts, each
    part sorted, so that a seed picks the same font on every run wherever the package is installed (a sort of whole
    paths put the bundled fonts first or last by the install folder's name); math/symbol fonts without Latin letters
    are left out. A machine with other system fonts makes other items from the same seed."""
    matplotlib = import_extra("matplotlib", "plots", "the benchmark generator")

    system = sorted(Path("/usr/share/fonts").rglob("*.ttf"))
    bundled = sorted(Path(matplotlib.get_data_path(), "fonts", "ttf").glob("*.ttf"))
    skip = ("Math", "Symbol", "STIX", "cmex", "cmsy", "cmmi", "cmr", "cmb", "cmss", "cmtt", "Display")
    return tuple(str(p) for p in [*system, *bundled] if not any(s in p.name for s in skip))


@lru_cache(maxsize=256)
def _truetype(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size)


def font(rng: random.Random, size: int, *, mono: bool = False) -> ImageFont.FreeTypeFont:
    """A random font of `size` pixels (a monospaced one when `mono`)."""
    paths = [p for p in font_paths() if ("Mono" in p) == mono] or list(font_paths())
    return _truetype(rng.choice(paths), size)


def pick_colors(rng: random.Random, k: int, *, exclude: tuple[str, ...] = ()) -> list[str]:
    """`k` different colour names."""
    return rng.sample([c for c in COLORS if c not in exclude], k)


@contextmanager
def new_figure(rng: random.Random, width: float, height: float) -> Iterator:
    """A matplotlib figure drawn by the Agg canvas, in a random font among the files found here. No pyplot and
    no global state: the font applies inside the `with` block only, so the caller renders the figure there."""
    matplotlib = import_extra("matplotlib", "plots", "the benchmark generator")
    from matplotlib import font_manager
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = rng.choice([p for p in font_paths() if "Mono" not in p] or list(font_paths()))
    font_manager.fontManager.addfont(path)
    name = font_manager.FontProperties(fname=path).get_name()
    with matplotlib.rc_context({"font.family": name}):
        fig = Figure(figsize=(width, height), dpi=100)
        FigureCanvasAgg(fig)
        yield fig


def figure_to_image(fig) -> Image.Image:
    """Render a matplotlib figure; PNG metadata is dropped so the pixels depend on the drawing only."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def degrade(image: Image.Image, rng: random.Random, *, noise: float = 10.0, max_rotation: float = 2.0,
            blur: float = 0.6) -> Image.Image:
    """Scanner-like degradation: a small rotation on a white background, a little blur and Gaussian pixel noise,
    each drawn from `rng` up to the given maxima."""
    angle = rng.uniform(-max_rotation, max_rotation)
    if abs(angle) > 0.05:
        image = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=(255, 255, 255))
    radius = rng.uniform(0, blur)
    if radius > 0.2:
        image = image.filter(ImageFilter.GaussianBlur(radius))
    sigma = rng.uniform(0, noise)
    if sigma > 0.5:
        noise_rng = np.random.default_rng(rng.getrandbits(32))
        pixels: np.ndarray = np.asarray(image, dtype=np.float32)
        pixels = pixels + noise_rng.normal(0.0, sigma, pixels.shape)
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image


def canvas(width: int, height: int, background: tuple[int, ...] = (255, 255, 255)):
    """A blank RGB image and its drawing handle."""
    image = Image.new("RGB", (width, height), background)
    return image, ImageDraw.Draw(image)
