"""Counting and line-crossing figures (VLMs-are-Blind style): shapes to count, nested squares, two coloured
polylines and their crossings, two circles that touch or not, and grids of rows by columns.

Layouts are drawn by rejection sampling with clear margins, so every count is exact and no crossing, touch or gap
is within a few pixels of ambiguity."""

from __future__ import annotations

import math
import random

from .base import COLORS, Draft, ask, canvas, degrade, pick_colors

Point = tuple[float, float]
_MARGIN = 10.0  # pixels: the least clearance between things that must read as separate (or as crossing)

QUESTIONS: dict[str, tuple[str, ...]] = {
    "count": (
        "How many {shape} are in the image?",
        "Count the {shape} in this picture.",
        "What is the number of {shape} shown?",
        "How many {shape} can you see?",
    ),
    "nested": (
        "How many squares are in the image?",
        "Count the squares in this picture.",
        "What is the number of squares shown, including squares inside other squares?",
    ),
    "crossings": (
        "How many times do the {c1} and {c2} lines intersect?",
        "How many times do the {c1} and {c2} lines touch each other?",
        "Count the points where the {c1} line crosses the {c2} line.",
    ),
    "touching": (
        "Are the two circles touching each other?",
        "Do the two circles overlap or touch?",
        "Is there contact between the two circles?",
    ),
    "grid": (
        "How many rows and columns are in the table?",
        "Give the number of rows and the number of columns of this grid.",
        "What are the dimensions of the grid, as (rows, columns)?",
    ),
}


def make(rng: random.Random) -> Draft:
    qtype = rng.choice(("count", "count", "crossings", "touching", "grid"))
    if qtype == "count":
        return rng.choice((_shapes, _shapes, _nested_squares))(rng)
    return {"crossings": _crossings, "touching": _touching, "grid": _grid}[qtype](rng)


def _polygon(center: Point, radius: float, sides: int, rotation: float) -> list[Point]:
    return [(center[0] + radius * math.cos(rotation + 2 * math.pi * i / sides),
             center[1] + radius * math.sin(rotation + 2 * math.pi * i / sides)) for i in range(sides)]


def _shapes(rng: random.Random) -> Draft:
    shape, sides = rng.choice((("circles", 0), ("pentagons", 5), ("squares", 4), ("triangles", 3), ("hexagons", 6)))
    count = rng.randint(2, 12)
    width, height = rng.choice(((512, 512), (640, 480), (800, 600), (768, 384)))
    image, draw = canvas(width, height)
    placed: list[tuple[Point, float]] = []
    while len(placed) < count:  # free placement; the margin keeps shapes apart
        radius = rng.uniform(18, 55) if rng.random() < 0.5 else rng.uniform(25, 35)
        c = (rng.uniform(radius + 5, width - radius - 5), rng.uniform(radius + 5, height - radius - 5))
        if all(math.dist(c, p) > r + radius + _MARGIN for p, r in placed):
            placed.append((c, radius))
        elif rng.random() < 0.002:  # crowded canvas: start over with a fresh layout
            placed = []
    same = rng.random() < 0.5
    colors = [COLORS[c] for c in pick_colors(rng, 6)]
    line_w = rng.randint(2, 5)
    filled = rng.random() < 0.3
    for i, (c, r) in enumerate(placed):
        color = colors[0] if same else colors[i % len(colors)]
        fill = color if filled else None
        if sides == 0:
            draw.ellipse((c[0] - r, c[1] - r, c[0] + r, c[1] + r), outline=color, width=line_w, fill=fill)
        else:
            draw.polygon(_polygon(c, r, sides, rng.uniform(0, 2 * math.pi)), outline=color, width=line_w, fill=fill)
    question = ask(rng, QUESTIONS["count"], "number", shape=shape)
    return Draft(question, str(count), "number", "count", [degrade(image, rng, noise=5, max_rotation=0, blur=0.4)])


def _nested_squares(rng: random.Random) -> Draft:
    count = rng.randint(2, 5)
    size = rng.choice((512, 640))
    image, draw = canvas(size, size)
    color = COLORS[rng.choice(("black", "blue", "red", "green", "navy"))]
    line_w = rng.randint(2, 4)
    side = rng.uniform(0.75, 0.9) * size
    x0 = y0 = (size - side) / 2
    for _ in range(count):  # each square inside the last, >= 35 px even when it is the fifth
        draw.rectangle((x0, y0, x0 + side, y0 + side), outline=color, width=line_w)
        inner = side * rng.uniform(0.55, 0.75)
        half_gap = (side - inner) / 2
        jitter = max(0.0, half_gap - _MARGIN - line_w)
        x0 += half_gap + rng.uniform(-jitter, jitter)
        y0 += half_gap + rng.uniform(-jitter, jitter)
        side = inner
    question = ask(rng, QUESTIONS["nested"], "number")
    return Draft(question, str(count), "number", "nested", [degrade(image, rng, noise=5, max_rotation=0)])


def _segments_cross(p1: Point, p2: Point, q1: Point, q2: Point) -> bool:
    def orient(a: Point, b: Point, c: Point) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    return (orient(p1, p2, q1) * orient(p1, p2, q2) < 0) and (orient(q1, q2, p1) * orient(q1, q2, p2) < 0)


def _point_segment_distance(p: Point, a: Point, b: Point) -> float:
    ax, ay = b[0] - a[0], b[1] - a[1]
    t = max(0.0, min(1.0, ((p[0] - a[0]) * ax + (p[1] - a[1]) * ay) / (ax * ax + ay * ay)))
    return math.dist(p, (a[0] + t * ax, a[1] + t * ay))


def _crossings(rng: random.Random) -> Draft:
    width, height = rng.choice(((600, 400), (800, 500), (500, 500)))
    k = rng.randint(3, 5)
    while True:
        xs = [width * (0.05 + 0.9 * i / (k - 1)) for i in range(k)]
        lines = [[(x, rng.uniform(0.08, 0.92) * height) for x in xs] for _ in range(2)]
        a, b = ([(p, q) for p, q in zip(line, line[1:])] for line in lines)
        clear = all(_point_segment_distance(v, *s) > _MARGIN for v in lines[0] for s in b) and \
            all(_point_segment_distance(v, *s) > _MARGIN for v in lines[1] for s in a)
        if clear:
            break
    crossings = sum(_segments_cross(*s, *t) for s in a for t in b)
    c1, c2 = pick_colors(rng, 2, exclude=("gray", "olive"))
    image, draw = canvas(width, height)
    line_w = rng.randint(2, 5)
    for line, color in zip(lines, (c1, c2)):
        draw.line(line, fill=COLORS[color], width=line_w, joint="curve")
    question = ask(rng, QUESTIONS["crossings"], "number", c1=c1, c2=c2)
    return Draft(question, str(crossings), "number", "crossings", [degrade(image, rng, noise=5, max_rotation=0)])


def _touching(rng: random.Random) -> Draft:
    width, height = rng.choice(((512, 512), (640, 400)))
    r1, r2 = rng.uniform(40, 110), rng.uniform(40, 110)
    touching = rng.random() < 0.5
    gap = rng.uniform(-0.5 * min(r1, r2), 0.0) if touching else rng.uniform(_MARGIN, 60)
    angle = rng.uniform(-0.6, 0.6)
    d = r1 + r2 + gap
    cx, cy = width / 2, height / 2
    c1 = (cx - d / 2 * math.cos(angle), cy - d / 2 * math.sin(angle))
    c2 = (cx + d / 2 * math.cos(angle), cy + d / 2 * math.sin(angle))
    scale = min(1.0, (width - 20) / (d + r1 + r2), (height - 20) / (2 * max(r1, r2) + abs(d * math.sin(angle))))
    image, draw = canvas(width, height)
    colors = pick_colors(rng, 2)
    line_w = rng.randint(2, 5)
    for (x, y), r, color in ((c1, r1, colors[0]), (c2, r2, colors[1])):
        x, y, r = cx + (x - cx) * scale, cy + (y - cy) * scale, r * scale
        draw.ellipse((x - r, y - r, x + r, y + r), outline=COLORS[color], width=line_w)
    question = ask(rng, QUESTIONS["touching"], "yesno")
    return Draft(question, "Yes" if touching else "No", "yesno", "touching",
                 [degrade(image, rng, noise=5, max_rotation=0)])


def _grid(rng: random.Random) -> Draft:
    rows, cols = rng.randint(2, 9), rng.randint(2, 9)
    cell_w, cell_h = rng.randint(40, 90), rng.randint(30, 60)
    margin = rng.randint(20, 60)
    image, draw = canvas(cols * cell_w + 2 * margin, rows * cell_h + 2 * margin)
    color = COLORS[rng.choice(("black", "navy", "gray", "blue"))]
    line_w = rng.randint(1, 4)
    for r in range(rows + 1):
        draw.line((margin, margin + r * cell_h, margin + cols * cell_w, margin + r * cell_h), fill=color, width=line_w)
    for c in range(cols + 1):
        draw.line((margin + c * cell_w, margin, margin + c * cell_w, margin + rows * cell_h), fill=color, width=line_w)
    question = ask(rng, QUESTIONS["grid"], "pair")
    return Draft(question, f"({rows}, {cols})", "pair", "grid", [degrade(image, rng, noise=5, max_rotation=1.0)])
