"""Classical OpenCV image analysis (capability `vision-cv`): shapes, lines and their crossings, grids, colours.

No offline object detector or image-text model exists here (see notes/offline-models.md), and the figures these
questions ask about (rings of circles, nested squares, crossing polylines, ruled tables) are drawn, not photographed,
so classical geometry is both exact and cheap. Every shape detector follows one recipe:

1. propose candidates cheaply (Hough transforms, straight ink runs);
2. verify each against the ink: the share of its outline that is drawn (`support`);
3. keep candidates greedily, best first, only while they explain ink no kept shape explains yet.

Step 3 is what tells overlapping shapes from duplicate proposals of one shape, without hand-set distances.
Ink is every pixel that differs from the background colour (the most common colour of the image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
from PIL import Image

from ..backends.packages import missing_package
from ..core.cancellation import current_cancel, raise_if_cancelled
from .colors import color_code, color_name, name_pixels
from .protocols import COLOR_NAMES, CONTACT_TOLERANCE_PX

__all__ = ["OpenCVVisionExpert", "Color", "Circle", "CirclePair", "Polygon", "Crossing", "Grid", "color_name"]

_Payload = TypeVar("_Payload")
"""What a candidate shape of `_Figure.keep_explaining` carries (a Circle, a Polygon)."""

INK_CONTRAST = 40
"""A pixel is ink when one channel differs from the background by more than this (0..255): keeps anti-aliasing."""
MIN_SUPPORT = 0.9
"""Share of a proposed outline that must lie on ink for the shape to count as drawn."""
NEW_INK = 0.5
"""A verified shape is kept only when at least this share of its outline is not explained by shapes kept before it."""
OUTLINE_TOLERANCE_PX = 2
"""How far (pixels) a proposed outline may stray from the ink and still count as lying on it."""
MIN_COLOR_SHARE = 0.01
"""Colours covering less of the ink than this are anti-aliasing noise, not colours of the figure."""


@dataclass(frozen=True)
class Color:
    """A named colour of the figure, its mean RGB and its share of all ink pixels."""

    name: str
    rgb: tuple[int, int, int]
    share: float


@dataclass(frozen=True)
class Circle:
    """A circle (outline or filled disc) in pixels; `support` is the share of its outline on ink."""

    cx: float
    cy: float
    r: float
    color: str
    filled: bool
    support: float


@dataclass(frozen=True)
class CirclePair:
    """Two circles and the gap between their rims in pixels (negative: they overlap by that much)."""

    first: Circle
    second: Circle
    gap: float

    @property
    def touching(self) -> bool:
        """Rims meet or overlap (tangent circles touch)."""
        return self.gap <= CONTACT_TOLERANCE_PX

    @property
    def overlapping(self) -> bool:
        """Areas overlap (tangent circles do not)."""
        return self.gap < -CONTACT_TOLERANCE_PX


@dataclass(frozen=True)
class Polygon:
    """A regular polygon: its vertices in order (pixels), colour and support."""

    vertices: tuple[tuple[float, float], ...]
    color: str
    support: float

    @property
    def sides(self) -> int:
        return len(self.vertices)

    @property
    def center(self) -> tuple[float, float]:
        xs, ys = zip(*self.vertices)
        return float(np.mean(xs)), float(np.mean(ys))

    @property
    def side(self) -> float:
        (x0, y0), (x1, y1) = self.vertices[0], self.vertices[1]
        return float(np.hypot(x1 - x0, y1 - y0))


@dataclass(frozen=True)
class Crossing:
    """Where two lines touch or cross: the centre of their contact area, in pixels."""

    x: float
    y: float


@dataclass(frozen=True)
class Grid:
    """A ruled grid: positions (pixels) of its horizontal and vertical rules; cells are the gaps between rules."""

    row_rules: tuple[float, ...]
    column_rules: tuple[float, ...]

    @property
    def rows(self) -> int:
        return max(len(self.row_rules) - 1, 0)

    @property
    def columns(self) -> int:
        return max(len(self.column_rules) - 1, 0)


class _Figure:
    """One image prepared for analysis: pixels, background, ink mask, stroke width. Built once per call."""

    def __init__(self, image: Image.Image, color: str | None = None):
        import cv2

        self.rgb = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))  # one copy of the pixels
        flat = self.rgb.reshape(-1, 3)
        values, counts = np.unique(flat[:: max(1, len(flat) // 50_000)], axis=0, return_counts=True)
        self.background = values[counts.argmax()].astype(int)
        # a byte-sized difference in one array (a 64-bit one took 480 MB at 10 MP, three byte-sized ones 90 MB)
        contrast = cv2.absdiff(self.rgb, (*(int(v) for v in self.background), 0)).max(axis=2)
        self.ink = (contrast > INK_CONTRAST).astype(np.uint8)
        if color is not None:
            self.ink &= (name_pixels(self.rgb) == color_code(color)).astype(np.uint8)
        contours, _ = cv2.findContours(self.ink, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
        perimeter = sum(cv2.arcLength(c, True) for c in contours)
        self.stroke = 2 * float(self.ink.sum()) / perimeter if perimeter else 0.0
        size = 2 * OUTLINE_TOLERANCE_PX + 1
        self.near_ink = cv2.dilate(self.ink, np.ones((size, size), np.uint8))
        self.diagonal = int(np.hypot(*self.ink.shape))

    def sample(self, array: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Values of a per-pixel array at float (x, y) points; points outside the image read 0."""
        pts = np.rint(points).astype(int)
        h, w = array.shape
        inside = (pts[..., 0] >= 0) & (pts[..., 0] < w) & (pts[..., 1] >= 0) & (pts[..., 1] < h)
        out = np.zeros(pts.shape[:-1], array.dtype)
        out[inside] = array[pts[..., 1][inside], pts[..., 0][inside]]
        return out

    def on(self, mask: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Whether a 0/1 mask is set at float (x, y) points."""
        return self.sample(mask, points) > 0

    def inside(self, points: np.ndarray) -> bool:
        h, w = self.ink.shape
        return bool(((points >= 0) & (points < (w, h))).all())

    def color_along(self, points: np.ndarray) -> str:
        """The name of the median ink colour along an outline."""
        hits = np.rint(points[self.on(self.ink, points)]).astype(int)
        if not len(hits):
            return "unknown"
        return color_name(np.median(self.rgb[hits[:, 1], hits[:, 0]], axis=0))

    def keep_explaining(self, candidates: Sequence[tuple[float, np.ndarray, _Payload]]) -> list[_Payload]:
        """Greedy selection (step 3 of the recipe) over (support, outline points, payload) candidates: best support
        first, ties broken by how well the outline follows the middle of the strokes."""
        import cv2

        depth = cv2.distanceTransform(self.ink, cv2.DIST_L2, 3)
        ranked = sorted(candidates, key=lambda c: (-round(c[0], 2), -self.sample(depth, c[1]).mean()))
        explained = np.zeros_like(self.ink)
        thickness = max(2 * OUTLINE_TOLERANCE_PX + 1, int(round(self.stroke)) + 2 * OUTLINE_TOLERANCE_PX)
        kept = []
        for support, outline, payload in ranked:
            if support < MIN_SUPPORT:
                break
            if self.on(explained, outline).mean() > 1 - NEW_INK:
                continue
            cv2.polylines(explained, [np.rint(outline).astype(np.int32).reshape(-1, 1, 2)], True, 1, thickness)
            kept.append(payload)
        return kept


def _circle_outline(cx: float, cy: float, r: float) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, max(36, int(2 * np.pi * r)), endpoint=False)
    return np.stack([cx + r * np.cos(t), cy + r * np.sin(t)], axis=1)


def _polygon_outline(vertices: np.ndarray) -> np.ndarray:
    parts = []
    for a, b in zip(vertices, np.roll(vertices, -1, axis=0)):
        steps = max(int(np.linalg.norm(b - a)), 4)
        parts.append(a + np.outer(np.arange(steps) / steps, b - a))
    return np.concatenate(parts)


def _rotate(v: np.ndarray, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([v[0] * c - v[1] * s, v[0] * s + v[1] * c])


def _fit_circle(points: np.ndarray) -> tuple[float, float, float]:
    """Least-squares (Kasa) circle through points, refitted once without the worst outliers."""
    for _ in range(2):
        x, y = points[:, 0].astype(float), points[:, 1].astype(float)
        a = np.stack([x, y, np.ones_like(x)], axis=1)
        (p, q, s), *_ = np.linalg.lstsq(a, x * x + y * y, rcond=None)
        cx, cy = p / 2, q / 2
        r = float(np.sqrt(s + cx * cx + cy * cy))
        residual = np.abs(np.hypot(x - cx, y - cy) - r)
        if len(points) < 12:
            break
        points = points[residual <= max(1.5, np.percentile(residual, 80))]
    return float(cx), float(cy), r


class OpenCVVisionExpert:
    """Stateless classical analyser; each method takes a PIL image and returns small dataclasses."""

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        if missing_package("cv2"):
            return "Python package 'opencv-python-headless' (cv2) is not installed"
        return None

    def colors(self, image: Image.Image) -> list[Color]:
        """The figure's colours by share of the ink, largest first."""
        fig = _Figure(image)
        mask = fig.ink.astype(bool)
        if not mask.any():
            return []
        codes = name_pixels(fig.rgb)[mask]
        pixels = fig.rgb[mask]
        found = []
        for code in np.unique(codes):
            sel = codes == code
            share = float(sel.mean())
            if share >= MIN_COLOR_SHARE:
                rgb = cast(tuple[int, int, int], tuple(int(v) for v in np.median(pixels[sel], axis=0)))  # R, G, B
                found.append(Color(COLOR_NAMES[code], rgb, share))
        return sorted(found, key=lambda c: -c.share)

    def circles(self, image: Image.Image, color: str | None = None) -> list[Circle]:
        """Circles drawn as outlines or filled discs, overlapping or not; `color` keeps only ink of that name."""
        import cv2

        fig = _Figure(image, color)
        proposals = []
        layers = [fig.rgb[..., c] for c in range(3)] if color is None else [fig.ink * 255]
        for layer in layers:
            blurred = cv2.GaussianBlur(np.ascontiguousarray(layer), (5, 5), 0)
            found = cv2.HoughCircles(blurred, cv2.HOUGH_GRADIENT_ALT, 1.5, minDist=5, param1=100, param2=0.8,
                                     minRadius=5, maxRadius=0)
            if found is not None:
                proposals.extend(found.reshape(-1, 3))
        edges = np.argwhere(self._edges(fig))[:, ::-1]
        candidates = []
        cancel = current_cancel()  # set when the call is abandoned: stop between proposals
        for cx, cy, r in proposals:
            raise_if_cancelled(cancel)
            cx, cy, r = self._refine_circle(edges, cx, cy, r, fig.stroke)
            outline = _circle_outline(cx, cy, r)
            support = float(fig.on(fig.near_ink, outline).mean())
            if support < MIN_SUPPORT:
                continue
            inner = _circle_outline(cx, cy, r * 0.5)
            filled = bool(fig.on(fig.ink, inner).mean() > 0.9)
            circle = Circle(cx, cy, r, fig.color_along(outline if not filled else inner), filled, support)
            candidates.append((support, outline, circle))
        return fig.keep_explaining(candidates)

    def circle_pairs(self, image: Image.Image) -> list[CirclePair]:
        """Every pair of circles found, with the gap between their rims; closest pairs first."""
        found = self.circles(image)
        pairs = [
            CirclePair(a, b, float(np.hypot(a.cx - b.cx, a.cy - b.cy) - a.r - b.r))
            for i, a in enumerate(found)
            for b in found[i + 1:]
        ]
        return sorted(pairs, key=lambda p: p.gap)

    @staticmethod
    def _edges(fig: _Figure) -> np.ndarray:
        """Colour edges: Canny on each channel, so discs of equal grey level still part."""
        import cv2

        return np.any([cv2.Canny(np.ascontiguousarray(fig.rgb[..., c]), 50, 150) > 0 for c in range(3)], axis=0)

    @staticmethod
    def _refine_circle(edges: np.ndarray, cx: float, cy: float, r: float, stroke: float) -> tuple[float, float, float]:
        """Sub-pixel circle from the colour edges near a Hough proposal (both sides of an outline average out)."""
        band = 2 + min(stroke, 0.15 * r)  # a filled disc "stroke" is its radius
        near = edges[np.abs(np.hypot(edges[:, 0] - cx, edges[:, 1] - cy) - r) <= band]
        if len(near) < 12:
            return float(cx), float(cy), float(r)
        return _fit_circle(near)

    def polygons(self, image: Image.Image, sides: int, color: str | None = None) -> list[Polygon]:
        """Regular polygons with `sides` sides (3 = triangle, 4 = square, 5 = pentagon...), any size, rotation and
        overlap. Each straight ink run proposes the polygon having it as one side, on either side of it."""
        import cv2

        if sides < 3:
            raise ValueError(f"a polygon needs at least 3 sides; got {sides}")
        fig = _Figure(image, color)
        min_side = max(8.0, 2.5 * fig.stroke)
        segments = cv2.HoughLinesP(fig.ink * 255, 1, np.pi / 180, threshold=10, minLineLength=min_side, maxLineGap=3)
        if segments is None:
            return []
        ys, xs = np.nonzero(fig.ink)
        ink_points = np.stack([xs, ys], axis=1).astype(float)
        candidates = []
        cancel = current_cancel()  # set when the call is abandoned: a noisy image has thousands of segments
        for x1, y1, x2, y2 in segments.reshape(-1, 4):
            raise_if_cancelled(cancel)
            line = self._ink_line(fig, ink_points, np.array([x1, y1], float), np.array([x2, y2], float))
            if line is None:
                continue
            for vertices in self._polygons_on(fig, *line, sides, min_side):
                outline = _polygon_outline(vertices)
                if not fig.inside(outline):
                    continue
                support = float(fig.on(fig.near_ink, outline).mean())
                if support >= MIN_SUPPORT:
                    polygon = Polygon(tuple(map(tuple, vertices.round(1).tolist())), fig.color_along(outline),
                                      support)
                    candidates.append((support, outline, polygon))
        return fig.keep_explaining(candidates)

    @staticmethod
    def _ink_line(fig: _Figure, ink_points: np.ndarray, p: np.ndarray, q: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, float, float] | None:
        """Fit the straight stroke under a Hough segment and follow it along the ink as far as it goes.
        Returns (origin, direction, start, end) with start/end as distances from origin, or None."""
        import cv2

        length = np.linalg.norm(q - p)
        u = (q - p) / length
        rel = ink_points - p
        along, across = rel @ u, np.abs(rel @ np.array([-u[1], u[0]]))
        near = ink_points[(along >= 0) & (along <= length) & (across <= 3)]
        if len(near) < 5:
            return None
        vx, vy, x0, y0 = cv2.fitLine(near.astype(np.float32), cv2.DIST_L2, 0, 0.01, 0.01).ravel()
        u, origin = np.array([vx, vy], float), np.array([x0, y0], float)
        steps = np.arange(-fig.diagonal, fig.diagonal + 1)
        on = fig.on(fig.ink, origin + np.outer(steps, u))
        centre = fig.diagonal
        if not on[centre]:
            return None
        start, end = centre, centre
        for direction in (-1, 1):  # walk while ink continues, bridging gaps of up to 2 px
            i, miss = centre, 0
            while 0 <= i + direction < len(on) and (on[i + direction] or miss < 2):
                miss = 0 if on[i + direction] else miss + 1
                i += direction
            i -= direction * miss
            start, end = (i, end) if direction < 0 else (start, i)
        return origin, u, float(steps[start]), float(steps[end])

    @staticmethod
    def _polygons_on(fig: _Figure, origin: np.ndarray, u: np.ndarray, start: float, end: float, sides: int,
                     min_side: float) -> list[np.ndarray]:
        """Regular polygons having part of the ink run [start, end] as a side. Where the run overshoots a vertex
        (other strokes continue it), the vertex is placed where the neighbouring side leaves at the right angle."""
        run = end - start
        if run < min_side:
            return []
        turn = 2 * np.pi / sides
        reach = int(0.35 * run) + 1
        ray = np.arange(2, max(6, int(0.35 * run)))
        # besides the fitted vertices, the run itself trimmed by up to one and a half stroke widths (a stroke
        # overshoots each vertex by about half its width)
        spans = [(start + trim / 2, end - trim / 2) for trim in (0, fig.stroke / 2, fig.stroke, 1.5 * fig.stroke)]
        out = []
        for sign in (1, -1):
            a = _best_vertex(fig, origin, u, np.arange(start, start + reach), -_rotate(u, -sign * turn), ray)
            b = _best_vertex(fig, origin, u, np.arange(end, end - reach, -1), _rotate(u, sign * turn), ray)
            for a_t, b_t in [(a, b), *spans]:
                side = b_t - a_t
                if side < min_side:
                    continue
                vertex, direction, vertices = origin + u * a_t, u.copy(), []
                for _ in range(sides):
                    vertices.append(vertex)
                    vertex = vertex + direction * side
                    direction = _rotate(direction, sign * turn)
                out.append(np.array(vertices))
        return out

    def line_crossings(self, image: Image.Image, color_a: str, color_b: str) -> list[Crossing]:
        """Places where a line of one colour touches or crosses a line of another (each contact counted once)."""
        import cv2

        rgb = np.asarray(image.convert("RGB"))
        codes = name_pixels(rgb)
        masks = [(codes == color_code(c)).astype(np.uint8) for c in (color_a, color_b)]
        widths = []
        for mask in masks:
            contours, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
            perimeter = sum(cv2.arcLength(c, True) for c in contours)
            widths.append(2 * float(mask.sum()) / perimeter if perimeter else 0.0)
        # the line drawn on top hides the other where they cross: reach across its whole width
        reach = int(np.ceil(max(widths) / 2)) + OUTLINE_TOLERANCE_PX
        kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * reach + 1, 2 * reach + 1))
        contact = cv2.dilate(masks[0], kernel) & cv2.dilate(masks[1], kernel)
        count, _, _, centroids = cv2.connectedComponentsWithStats(contact)
        return [Crossing(float(x), float(y)) for x, y in centroids[1:count]]

    def grid(self, image: Image.Image) -> Grid:
        """The rules of a table or grid: straight ink lines spanning most of the figure's width or height."""
        import cv2

        fig = _Figure(image)
        h, w = fig.ink.shape
        ink = fig.ink * 255
        # opening with a rule a tenth of the image long keeps straight rules and removes text and short marks
        horizontal = cv2.morphologyEx(
            ink, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (max(10, w // 10), 1))
        )
        vertical = cv2.morphologyEx(
            ink, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (1, max(10, h // 10)))
        )
        ys, xs = np.nonzero(horizontal | vertical)
        if not len(xs):
            return Grid((), ())
        return Grid(_rules(horizontal.sum(axis=1) / 255, np.ptp(xs)), _rules(vertical.sum(axis=0) / 255, np.ptp(ys)))


def _best_vertex(fig: _Figure, origin: np.ndarray, u: np.ndarray, positions: np.ndarray, ray: np.ndarray,
                 steps: np.ndarray) -> float:
    """The position along a line from which a ray (the neighbouring side) stays on ink best; the middle of the
    best plateau, since a thick stroke covers the ray for a few positions around the true vertex."""
    starts = origin + np.outer(positions, u)
    rays = starts[:, None, :] + steps[None, :, None] * ray[None, None, :]
    cover = fig.on(fig.near_ink, rays).mean(axis=1)
    best = np.nonzero(cover >= cover.max() - 0.02)[0]
    return float(positions[(best.min() + best.max()) // 2])


def _rules(profile: np.ndarray, extent: float | np.integer) -> tuple[float, ...]:
    """Centres of runs where a line's ink covers more than half the figure's extent."""
    on = np.concatenate([[0], (profile > 0.5 * extent).astype(int), [0]])
    edges = np.diff(on)
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    return tuple(float((s + e - 1) / 2) for s, e in zip(starts, ends))
