"""Measuring a line drawing: where its labelled points are, and what is drawn between them.

A point's label is printed next to it, so the point is taken as the drawn (dark) pixel nearest to the label once
all text is masked out. Angles, length and area ratios are then measured on those points, and a segment counts as
drawn when dark pixels run along nearly all of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

__all__ = ["Figure", "read_figure"]

_DARK = 140  # grey level below which a pixel is ink
_NEAR_PX = 2.5  # a segment pixel counts as drawn when ink lies this close (line width, antialiasing)
_DRAWN_SHARE = 0.88  # share of a segment's samples that must be ink for the segment to be drawn


@dataclass
class Figure:
    points: dict[str, tuple[float, float]]  # label -> (x, y) in pixels
    ink: np.ndarray  # bool mask of drawn pixels, text removed

    def angle(self, a: str, vertex: str, b: str) -> float:
        """Angle a-vertex-b in degrees."""
        (ax, ay), (vx, vy), (bx, by) = self.points[a], self.points[vertex], self.points[b]
        u, v = (ax - vx, ay - vy), (bx - vx, by - vy)
        cos = (u[0] * v[0] + u[1] * v[1]) / max(math.hypot(*u) * math.hypot(*v), 1e-9)
        return math.degrees(math.acos(max(-1.0, min(1.0, cos))))

    def length(self, a: str, b: str) -> float:
        return math.dist(self.points[a], self.points[b])

    def area(self, names: str) -> float:
        """Shoelace area of the polygon through the named points, in that order."""
        xs = [self.points[n][0] for n in names]
        ys = [self.points[n][1] for n in names]
        return abs(sum(xs[i] * ys[i - 1] - xs[i - 1] * ys[i] for i in range(len(names)))) / 2

    def drawn_share(self, a: str, b: str) -> float:
        """Share of the segment a-b (its middle 80 %, away from the labels' guesses) that lies on ink."""
        (ax, ay), (bx, by) = self.points[a], self.points[b]
        steps = max(int(math.dist((ax, ay), (bx, by))), 8)
        ts = np.linspace(0.1, 0.9, steps)
        xs = np.clip(np.round(ax + ts * (bx - ax)).astype(int), 0, self.ink.shape[1] - 1)
        ys = np.clip(np.round(ay + ts * (by - ay)).astype(int), 0, self.ink.shape[0] - 1)
        return float(self.ink[ys, xs].mean())

    def is_drawn(self, a: str, b: str) -> bool:
        return self.drawn_share(a, b) >= _DRAWN_SHARE

    def has_polygon(self, names: str) -> bool:
        """Every side drawn, and no three consecutive corners on one line (else it is a smaller polygon)."""
        corners = list(names)
        sides_drawn = all(self.is_drawn(corners[i - 1], corners[i]) for i in range(len(corners)))
        straight = any(abs(180 - self.angle(corners[i - 1], corners[i], corners[(i + 1) % len(corners)])) < 12
                       for i in range(len(corners)))
        return sides_drawn and not straight


def read_figure(image: Image.Image, boxes) -> Figure:
    """Locate single-letter labels among OCR boxes (a box such as 'AB' is split evenly) and snap each to the ink."""
    gray = np.asarray(image.convert("L"), dtype=np.uint8)
    dark = gray < _DARK
    text_mask = np.zeros_like(dark)
    labels: dict[str, tuple[float, float]] = {}
    for box in boxes:
        x0, y0, x1, y1 = (int(round(v)) for v in box.box)
        text = box.text.strip().replace("′", "").replace("'", "")
        text_mask[max(y0 - 1, 0): y1 + 2, max(x0 - 1, 0): x1 + 2] = True
        if text.isalpha() and text.isupper() and len(text) <= 3:
            width = (x1 - x0) / len(text)
            for i, letter in enumerate(text):
                labels.setdefault(letter, (x0 + width * (i + 0.5), (y0 + y1) / 2))
    ink = _dilate(dark & ~text_mask)
    ys, xs = np.nonzero(dark & ~text_mask)
    points: dict[str, tuple[float, float]] = {}
    if len(xs):
        for letter, (cx, cy) in labels.items():
            i = int(np.argmin((xs - cx) ** 2 + (ys - cy) ** 2))
            points[letter] = (float(xs[i]), float(ys[i]))
    return Figure(points, ink)


def _dilate(mask: np.ndarray) -> np.ndarray:
    import cv2

    size = int(2 * _NEAR_PX) | 1
    return cv2.dilate(mask.astype(np.uint8), np.ones((size, size), np.uint8)).astype(bool)
