"""Geometry figures with labelled lengths and angles, drawn to scale: right triangles (Pythagoras), a triangle's
missing angle, rectangles (area, perimeter) and circles (area, circumference); some as multiple choice."""

from __future__ import annotations

import math
import random

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


def make(rng: random.Random) -> Draft:
    kind = rng.choice(("right", "angle", "rect", "circle"))
    unit = rng.choice(_UNITS)
    image, draw = canvas(*rng.choice(((520, 420), (640, 480), (600, 600))))
    ink = COLORS[rng.choice(("black", "navy", "blue", "brown"))]
    face = font(rng, rng.randint(16, 24))
    line_w = rng.randint(2, 4)

    def label(at: Point, text: str) -> None:
        draw.text(at, text, fill=(0, 0, 0), font=face, anchor="mm")

    def length(v: float) -> str:
        return f"{fmt_num(v)} {unit}".strip()

    w, h = image.size
    if kind in ("right", "angle"):
        if kind == "right":
            a, b, c = (k * rng.choice((1, 1, 2, 3)) for k in rng.choice(_TRIPLES)) if rng.random() < 0.6 else \
                (rng.randint(2, 15), rng.randint(2, 15), None)
            c = c if c is not None else math.hypot(a, b)
            angle_a = math.atan2(b, a)
        else:
            alpha, beta = rng.randint(25, 85), rng.randint(25, 85)
            gamma = 180 - alpha - beta
            if gamma < 15:
                alpha, beta = alpha - 10, beta - 10
                gamma = 180 - alpha - beta
            angle_a = math.radians(alpha)
        p_a, p_b, p_c = _triangle(kind, w, h, angle_a, math.radians(beta) if kind == "angle" else None)
        draw.polygon([p_a, p_b, p_c], outline=ink, width=line_w)
        names = rng.sample(("A", "B", "C", "D", "E", "F", "P", "Q", "R", "X", "Y", "Z"), 3)
        for p, name in zip((p_a, p_b, p_c), names):
            label(_away(p, (p_a, p_b, p_c), 22), name)
        if kind == "right":
            _right_marker(draw, p_b, p_a, p_c, ink)
            sides = {"base": (p_a, p_b, a), "height": (p_b, p_c, b), "hyp": (p_a, p_c, c)}
            whole = float(c).is_integer()  # a leg is asked only when every printed length is exact
            unknown = "hyp" if not whole or rng.random() < 0.5 else rng.choice(("base", "height"))
            for key, (p, q, value) in sides.items():
                text = "?" if key == unknown else length(value)
                label(_away(((p[0] + q[0]) / 2, (p[1] + q[1]) / 2), (p_a, p_b, p_c), 30), text)
            ends = {"base": (0, 1), "height": (1, 2), "hyp": (0, 2)}[unknown]
            side = names[ends[0]] + names[ends[1]]
            qtype = "hypotenuse" if unknown == "hyp" else "leg"
            value, tolerance = sides[unknown][2], 0.01
        else:
            for p, text in ((p_a, f"{alpha}°"), (p_b, f"{beta}°"), (p_c, "x")):
                label(_toward(p, (p_a, p_b, p_c), 45), text)
            qtype, value, tolerance, side = "angle", gamma, None, ""
        fields = {"side": side}
    elif kind == "rect":
        rw, rh = rng.randint(2, 30), rng.randint(2, 30)
        scale = min((w - 160) / rw, (h - 160) / rh)
        x0, y0 = (w - rw * scale) / 2, (h - rh * scale) / 2
        draw.rectangle((x0, y0, x0 + rw * scale, y0 + rh * scale), outline=ink, width=line_w)
        label((x0 + rw * scale / 2, y0 + rh * scale + 25), length(rw))
        label((x0 + rw * scale + 45, y0 + rh * scale / 2), length(rh))
        qtype = rng.choice(("rect-area", "rect-perimeter"))
        value, tolerance, fields = (rw * rh if qtype == "rect-area" else 2 * (rw + rh)), None, {}
    else:
        r = rng.randint(1, 20)
        diameter = rng.random() < 0.4
        radius_px = min(w, h) * 0.35
        cx, cy = w / 2, h / 2
        draw.ellipse((cx - radius_px, cy - radius_px, cx + radius_px, cy + radius_px), outline=ink, width=line_w)
        draw.ellipse((cx - 4, cy - 4, cx + 4, cy + 4), fill=ink)
        start = cx - radius_px if diameter else cx
        draw.line((start, cy, cx + radius_px, cy), fill=ink, width=line_w)
        given = f"d = {length(2 * r)}" if diameter else f"r = {length(r)}"
        label(((start + cx + radius_px) / 2, cy - 20), given)
        qtype = rng.choice(("circle-area", "circumference"))
        value = math.pi * r * r if qtype == "circle-area" else 2 * math.pi * r
        tolerance, fields = 0.01, {}
    image = degrade(image, rng, noise=6, max_rotation=1.5)
    answer = fmt_num(value)
    if rng.random() < CHOICE_PROBABILITY:
        options = _options(rng, value)
        question = ask(rng, QUESTIONS[qtype], "choice", **fields)
        return Draft(question, fmt_num(value), "choice", qtype, [image], choices=options)
    return Draft(ask(rng, QUESTIONS[qtype], "number", **fields), answer, "number", qtype, [image],
                 tolerance=tolerance)


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
