"""Geometry figures with labelled lengths and angles, drawn to scale: right triangles (Pythagoras), a triangle's
missing angle, rectangles (area, perimeter) and circles (area, circumference); some as multiple choice."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from PIL import ImageDraw, ImageFont

from .base import COLORS, Draft, ask, canvas, degrade, fmt_num, font

Point = tuple[float, float]
_TRIPLES = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (6, 8, 10), (9, 12, 15), (20, 21, 29))
_UNITS = ("cm", "m", "in", "mm", "")
CHOICE_PROBABILITY = 0.4

QUESTIONS: dict[str, tuple[str, ...]] = {
    "hypotenuse": (
        "Find the length of the hypotenuse of the right triangle.",
        "In the figure, the triangle has a right angle. How long is side {side}?",
        "What is the length of {side}?",
    ),
    "leg": (
        "The triangle is right-angled. Find the length of {side}.",
        "What is the length of the missing side {side}?",
        "Using the figure, compute the length of {side}.",
    ),
    "angle": (
        "Find the measure of angle x in degrees.",
        "What is the value of x in the triangle?",
        "Two angles of the triangle are given. How many degrees is x?",
    ),
    "rect-area": (
        "What is the area of the rectangle?",
        "Find the area of the rectangle shown.",
        "How large is the area enclosed by this rectangle?",
    ),
    "rect-perimeter": (
        "What is the perimeter of the rectangle?",
        "Find the perimeter of the rectangle shown.",
        "How long is the boundary of this rectangle in total?",
    ),
    "circle-area": (
        "What is the area of the circle? Round to two decimal places.",
        "Find the area of the circle (use π ≈ 3.14159), to 2 decimals.",
        "Compute the area enclosed by the circle, rounded to the hundredths.",
    ),
    "circumference": (
        "What is the circumference of the circle? Round to two decimal places.",
        "Find the perimeter of the circle, to 2 decimals.",
        "How long is the circle's circumference, rounded to the hundredths?",
    ),
}


@dataclass
class _Sheet:
    """The canvas a figure is drawn on, with the pen, the label font and the unit its lengths are printed in."""

    draw: ImageDraw.ImageDraw
    size: tuple[int, int]
    ink: tuple[int, int, int]
    face: ImageFont.FreeTypeFont
    line_w: int
    unit: str

    def label(self, at: Point, text: str) -> None:
        self.draw.text(at, text, fill=(0, 0, 0), font=self.face, anchor="mm")

    def length(self, v: float) -> str:
        return f"{fmt_num(v)} {self.unit}".strip()


_Asked = tuple[str, float, float | None, dict[str, str]]
"""What a figure asks: the question type, the exact value, its tolerance and the question template's fields."""


def make(rng: random.Random) -> Draft:
    kind = rng.choice(("right", "angle", "rect", "circle"))
    unit = rng.choice(_UNITS)
    image, draw = canvas(*rng.choice(((520, 420), (640, 480), (600, 600))))
    ink = COLORS[rng.choice(("black", "navy", "blue", "brown"))]
    sheet = _Sheet(draw, image.size, ink, font(rng, rng.randint(16, 24)), rng.randint(2, 4), unit)
    if kind in ("right", "angle"):
        qtype, value, tolerance, fields = _triangle_figure(rng, kind, sheet)
    elif kind == "rect":
        qtype, value, tolerance, fields = _rect_figure(rng, sheet)
    else:
        qtype, value, tolerance, fields = _circle_figure(rng, sheet)
    image = degrade(image, rng, noise=6, max_rotation=1.5)
    if rng.random() < CHOICE_PROBABILITY:
        options = _options(rng, value)
        question = ask(rng, QUESTIONS[qtype], "choice", **fields)
        return Draft(question, fmt_num(value), "choice", qtype, [image], choices=options)
    return Draft(ask(rng, QUESTIONS[qtype], "number", **fields), fmt_num(value), "number", qtype, [image],
                 tolerance=tolerance)


def _triangle_figure(rng: random.Random, kind: str, sheet: _Sheet) -> _Asked:
    """A right triangle with one side unknown (Pythagoras), or a triangle with its third angle unknown."""
    w, h = sheet.size
    if kind == "right":
        a, b, hyp = (k * rng.choice((1, 1, 2, 3)) for k in rng.choice(_TRIPLES)) if rng.random() < 0.6 else \
            (rng.randint(2, 15), rng.randint(2, 15), None)
        c = hyp if hyp is not None else math.hypot(a, b)
        angle_a = math.atan2(b, a)
    else:
        alpha, beta = rng.randint(25, 85), rng.randint(25, 85)
        gamma = 180 - alpha - beta
        if gamma < 15:
            alpha, beta = alpha - 10, beta - 10
            gamma = 180 - alpha - beta
        angle_a = math.radians(alpha)
    p_a, p_b, p_c = _triangle(kind, w, h, angle_a, math.radians(beta) if kind == "angle" else None)
    sheet.draw.polygon([p_a, p_b, p_c], outline=sheet.ink, width=sheet.line_w)
    names = rng.sample(("A", "B", "C", "D", "E", "F", "P", "Q", "R", "X", "Y", "Z"), 3)
    for p, name in zip((p_a, p_b, p_c), names):
        sheet.label(_away(p, (p_a, p_b, p_c), 22), name)
    if kind == "angle":
        for p, text in ((p_a, f"{alpha}°"), (p_b, f"{beta}°"), (p_c, "x")):
            sheet.label(_toward(p, (p_a, p_b, p_c), 45), text)
        return "angle", gamma, None, {"side": ""}
    _right_marker(sheet.draw, p_b, p_a, p_c, sheet.ink)
    sides = {"base": (p_a, p_b, a), "height": (p_b, p_c, b), "hyp": (p_a, p_c, c)}
    whole = float(c).is_integer()  # a leg is asked only when every printed length is exact
    unknown = "hyp" if not whole or rng.random() < 0.5 else rng.choice(("base", "height"))
    for key, (p, q, value) in sides.items():
        text = "?" if key == unknown else sheet.length(value)
        sheet.label(_away(((p[0] + q[0]) / 2, (p[1] + q[1]) / 2), (p_a, p_b, p_c), 30), text)
    ends = {"base": (0, 1), "height": (1, 2), "hyp": (0, 2)}[unknown]
    qtype = "hypotenuse" if unknown == "hyp" else "leg"
    return qtype, sides[unknown][2], 0.01, {"side": names[ends[0]] + names[ends[1]]}


def _rect_figure(rng: random.Random, sheet: _Sheet) -> _Asked:
    """A rectangle with its two side lengths printed; its area or perimeter asked."""
    w, h = sheet.size
    rw, rh = rng.randint(2, 30), rng.randint(2, 30)
    scale = min((w - 160) / rw, (h - 160) / rh)
    x0, y0 = (w - rw * scale) / 2, (h - rh * scale) / 2
    sheet.draw.rectangle((x0, y0, x0 + rw * scale, y0 + rh * scale), outline=sheet.ink, width=sheet.line_w)
    sheet.label((x0 + rw * scale / 2, y0 + rh * scale + 25), sheet.length(rw))
    sheet.label((x0 + rw * scale + 45, y0 + rh * scale / 2), sheet.length(rh))
    qtype = rng.choice(("rect-area", "rect-perimeter"))
    return qtype, (rw * rh if qtype == "rect-area" else 2 * (rw + rh)), None, {}


def _circle_figure(rng: random.Random, sheet: _Sheet) -> _Asked:
    """A circle with its radius or diameter drawn and printed; its area or circumference asked."""
    w, h = sheet.size
    r = rng.randint(1, 20)
    diameter = rng.random() < 0.4
    radius_px = min(w, h) * 0.35
    cx, cy = w / 2, h / 2
    draw, ink = sheet.draw, sheet.ink
    draw.ellipse((cx - radius_px, cy - radius_px, cx + radius_px, cy + radius_px), outline=ink, width=sheet.line_w)
    draw.ellipse((cx - 4, cy - 4, cx + 4, cy + 4), fill=ink)
    start = cx - radius_px if diameter else cx
    draw.line((start, cy, cx + radius_px, cy), fill=ink, width=sheet.line_w)
    given = f"d = {sheet.length(2 * r)}" if diameter else f"r = {sheet.length(r)}"
    sheet.label(((start + cx + radius_px) / 2, cy - 20), given)
    qtype = rng.choice(("circle-area", "circumference"))
    return qtype, (math.pi * r * r if qtype == "circle-area" else 2 * math.pi * r), 0.01, {}


def _options(rng: random.Random, value: float) -> list[str]:
    """Four options: the answer and three plausible wrong values (scaled or shifted), all distinct as text."""
    options = {fmt_num(value)}
    while len(options) < 4:
        wrong = value * rng.choice((0.5, 1.5, 2, 0.75, 1.25)) + rng.choice((0, 1, -1, 2, 5))
        if wrong > 0:
            options.add(fmt_num(wrong))
    ordered = sorted(options)
    rng.shuffle(ordered)
    return ordered


def _triangle(kind: str, w: int, h: int, angle_a: float, angle_b: float | None) -> tuple[Point, Point, Point]:
    """Vertices scaled into the canvas: the right angle at B for right triangles, else angles A and B at the base."""
    if kind == "right":
        base, height = math.cos(angle_a), math.sin(angle_a)
    else:
        # apex from the base angles: x = tan(B) / (tan(A) + tan(B)) along a unit base
        assert angle_b is not None  # a triangle of kind "angle" is given its angle B (`_triangle_figure`)
        ta, tb = math.tan(angle_a), math.tan(angle_b)
        x = tb / (ta + tb)
        base, height, apex_x = 1.0, x * ta, x
    scale = min((w - 140) / base, (h - 140) / height)
    x0 = (w - base * scale) / 2
    y0 = (h + height * scale) / 2
    p_a, p_b = (x0, y0), (x0 + base * scale, y0)
    p_c = (p_b[0], y0 - height * scale) if kind == "right" else (x0 + apex_x * scale, y0 - height * scale)
    return p_a, p_b, p_c


def _centroid(points: tuple[Point, ...]) -> Point:
    return sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points)


def _away(p: Point, shape: tuple[Point, ...], distance: float) -> Point:
    """`p` moved `distance` pixels away from the shape's centroid: where a vertex or side label goes."""
    cx, cy = _centroid(shape)
    dx, dy = p[0] - cx, p[1] - cy
    norm = math.hypot(dx, dy) or 1.0
    return p[0] + distance * dx / norm, p[1] + distance * dy / norm


def _toward(p: Point, shape: tuple[Point, ...], distance: float) -> Point:
    return _away(p, shape, -distance)


def _right_marker(draw, corner: Point, p: Point, q: Point, ink: tuple[int, int, int], size: float = 16) -> None:
    """The small square that marks a right angle at `corner` between the sides to `p` and `q`."""
    def unit(a: Point) -> Point:
        d = math.dist(corner, a)
        return (a[0] - corner[0]) / d, (a[1] - corner[1]) / d

    u, v = unit(p), unit(q)
    pts = [(corner[0] + size * u[0], corner[1] + size * u[1]),
           (corner[0] + size * (u[0] + v[0]), corner[1] + size * (u[1] + v[1])),
           (corner[0] + size * v[0], corner[1] + size * v[1])]
    draw.line(pts, fill=ink, width=2)
