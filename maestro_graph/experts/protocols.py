"""The contract between skills and experts: one method set per capability.

A model card's `capabilities` promise these methods. Skill code calls them through `ctx.model` (or `ctx.expert(cap)`),
so any backend that implements the methods can serve any skill that needs the capability.

- `ocr`:         `ocr(image: PIL.Image) -> list[TextBox]`
- `chat`:        `chat(messages: list[dict]) -> ChatReply` (OpenAI message format, text only)
- `vision-chat`: `chat(messages)` where user content may hold `image_url` parts (data URLs); any skill that says
                 `or-requires: "vision-chat"` runs on it through `maestro_graph.registry.vision`
- `math`:        `evaluate(expression: str) -> str`, `solve(equations: list[str], unknown: str | None) -> list[str]`
- `vision-cv`:   classical image analysis (`maestro_graph.experts.opencv_vision`): `colors(image)`,
                 `circles(image, color)`, `circle_pairs(image)`, `polygons(image, sides, color)`,
                 `line_crossings(image, color_a, color_b)`, `grid(image)`; the shape and colour names they take and
                 the gap at which circles touch are below
- `barcode`:     `decode(image: PIL.Image) -> list[Barcode]`

An expert class may define `unavailable_reason(**options) -> str | None` (a classmethod, cheap) so the registry can
report it unavailable, with the reason, without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TextBox", "ChatReply", "Barcode", "COLOR_NAMES", "POLYGON_SIDES", "SHAPE_NAMES", "CONTACT_TOLERANCE_PX",
           "shape_kind"]

COLOR_NAMES = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "magenta", "pink", "brown", "black",
               "gray", "white")
"""The colours a `vision-cv` model names (experts.colors), and the ones its `color` arguments take."""
POLYGON_SIDES = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6, "heptagon": 7, "octagon": 8,
                 "nonagon": 9, "decagon": 10}
"""Regular polygons by name (the kinds `polygons` finds); circles are the other kind."""
_CIRCLE_NAMES = ("circle", "ring", "disc", "disk")
SHAPE_NAMES = (*_CIRCLE_NAMES, *POLYGON_SIDES)
"""Every shape noun a `vision-cv` model understands (singular); `shape_kind` maps them, and plurals, to a kind."""
CONTACT_TOLERANCE_PX = 2.0
"""Circles whose gap is within this many pixels of zero are tangent: touching, not overlapping (fits are sub-pixel)."""


def shape_kind(word: str) -> str | None:
    """'Pentagons' -> 'pentagon', 'rings' -> 'circle'; None for a word that names no shape kind here."""
    word = word.lower().strip()
    singular = word[:-1] if word.endswith("s") and word[:-1] in SHAPE_NAMES else word
    if singular not in SHAPE_NAMES:
        return None
    return "circle" if singular in _CIRCLE_NAMES else singular


@dataclass(frozen=True)
class TextBox:
    """One recognised piece of text: its box in pixels (x0, y0, x1, y1) and the engine's confidence 0..1."""

    text: str
    box: tuple[float, float, float, float]
    confidence: float

    @property
    def cx(self) -> float:
        return (self.box[0] + self.box[2]) / 2

    @property
    def cy(self) -> float:
        return (self.box[1] + self.box[3]) / 2

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass(frozen=True)
class ChatReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    """Of `completion_tokens`, those a reasoning model spent before its reply (as `usage` reports them)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Barcode:
    text: str
    format: str
    box: tuple[float, float, float, float] | None = None


