"""Pixel reading: background and series colours, the extent of a mark at a category, node-link edges, chart shape.

Everything works on an RGB uint8 array. Reading is done along one orientation: the caller passes the array so that
the value axis runs along rows (a horizontal-bar chart is transposed first).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from maestro_graph.experts.protocols import TextBox

COLOUR_MATCH = 45.0  # RGB distance within which a pixel belongs to a series colour
MARK_CONTRAST = 80.0  # RGB distance from the background for an uncoloured mark pixel


def background(arr: np.ndarray) -> np.ndarray:
    """The most common colour (quantised to 8 levels per channel), as the mean of its pixels."""
    q = (arr // 32).reshape(-1, 3).astype(np.int32)
    keys = q[:, 0] * 64 + q[:, 1] * 8 + q[:, 2]
    mode = np.bincount(keys).argmax()
    return arr.reshape(-1, 3)[keys == mode].mean(axis=0)


def distance(arr: np.ndarray, colour: np.ndarray) -> np.ndarray:
    return np.linalg.norm(arr.astype(np.float32) - colour.astype(np.float32), axis=-1)


def text_mask(shape: tuple[int, int], boxes: list[TextBox], pad: int = 2) -> np.ndarray:
    """True inside OCR boxes: text pixels are not marks."""
    mask = np.zeros(shape, bool)
    for b in boxes:
        x0, y0, x1, y1 = (int(v) for v in b.box)
        mask[max(y0 - pad, 0) : y1 + pad, max(x0 - pad, 0) : x1 + pad] = True
    return mask


def swatch_colour(arr: np.ndarray, label: TextBox, bg: np.ndarray) -> np.ndarray | None:
    """The legend colour drawn just left (or else right) of a label: the commonest non-background colour there."""
    h = max(label.height, 8)
    y0, y1 = int(label.box[1]), int(label.box[3]) + 1
    for x0, x1 in ((label.box[0] - 4 * h, label.box[0] - 1), (label.box[2] + 1, label.box[2] + 4 * h)):
        patch = arr[max(y0, 0) : y1, max(int(x0), 0) : max(int(x1), 0)].reshape(-1, 3)
        if not len(patch):
            continue
        patch = patch[distance(patch, bg) > 40]
        grey = (patch.max(axis=1).astype(int) - patch.min(axis=1)) < 20
        coloured = patch[~grey] if (~grey).sum() >= 4 else patch
        if len(coloured) >= 4:
            q = (coloured // 24).astype(np.int32)
            keys = q[:, 0] * 4096 + q[:, 1] * 64 + q[:, 2]
            mode = np.bincount(keys - keys.min()).argmax() + keys.min()
            if (keys == mode).sum() >= 0.2 * h * h:  # a solid swatch, not a stray tick or letter
                return coloured[keys == mode].mean(axis=0)
    return None


@dataclass
class Extent:
    """A run of mark pixels in one column: far end (max value), near end (min value), and its length in pixels."""

    top: float
    bottom: float
    length: int


def mark_extent(arr: np.ndarray, axis_value, rows: tuple[int, int], centre: float, half_window: float,
                mask: np.ndarray) -> Extent | None:
    """The run of `mask` pixels in the column nearest to `centre` (within the window) that has any.
    `axis_value(row)` converts a row to a value; `rows` bounds the plot."""
    r0, r1 = max(rows[0], 0), min(rows[1], arr.shape[0])
    lo, hi = max(int(centre - half_window), 0), min(int(centre + half_window) + 1, arr.shape[1])
    for c in sorted(range(lo, hi), key=lambda c: abs(c - centre)):
        hits = np.flatnonzero(mask[r0:r1, c]) + r0
        if len(hits) < 2:
            continue
        runs = np.split(hits, np.flatnonzero(np.diff(hits) > 2) + 1)
        run = max(runs, key=len)
        values = [axis_value(run[0]), axis_value(run[-1])]
        return Extent(max(values), min(values), len(run))
    return None


def node_link(arr: np.ndarray, a: TextBox, b: TextBox, boxes: list[TextBox]) -> tuple[float, float]:
    """(edge score 0..1, direction score) for a straight edge between the nodes labelled `a` and `b`.
    Edge score: share of the open stretch between the nodes with a dark stroke across it; direction > 0 when the
    stroke is widest (an arrow head) near `b`."""
    bg = background(arr)
    grey = arr.astype(np.int32).mean(axis=2)
    node = arr[int(a.cy), int(a.cx)].astype(np.float32)
    p, q = np.array([a.cx, a.cy]), np.array([b.cx, b.cy])
    length = np.linalg.norm(q - p)
    if length < 1:
        return 0.0, 0.0
    normal = np.array([-(q - p)[1], (q - p)[0]]) / length
    texts = text_mask(arr.shape[:2], boxes, pad=1)
    dark, widths, ts = [], [], []
    for t in np.linspace(0, 1, int(length // 2)):
        x, y = p + t * (q - p)
        xi, yi = int(x), int(y)
        if not (0 <= yi < arr.shape[0] and 0 <= xi < arr.shape[1]):
            continue
        pix = arr[yi, xi].astype(np.float32)
        if texts[yi, xi] or np.linalg.norm(pix - node) < 30 and np.linalg.norm(pix - bg) > 30:
            continue  # inside a node or its label
        width = 0
        for s in range(-10, 11):
            u, v = (np.array([x, y]) + s * normal).astype(int)
            if 0 <= v < arr.shape[0] and 0 <= u < arr.shape[1] and grey[v, u] < 120 and not texts[v, u]:
                width += 1
        dark.append(width > 0)
        widths.append(width)
        ts.append(t)
    if len(dark) < 5:
        return 0.0, 0.0
    score = float(np.mean(dark))
    widths_arr, ts_arr = np.array(widths), np.array(ts)
    near_b = widths_arr[ts_arr > 0.5].max(initial=0)
    near_a = widths_arr[ts_arr <= 0.5].max(initial=0)
    return score, float(near_b - near_a)


def shape_features(arr: np.ndarray, boxes: list[TextBox]) -> dict[str, float]:
    """Cheap layout statistics of the non-background, non-text pixels used to tell chart types apart."""
    small = cv2.resize(arr, (400, int(400 * arr.shape[0] / arr.shape[1])), interpolation=cv2.INTER_AREA)
    scale = 400 / arr.shape[1]
    bg = background(small)
    mask = distance(small, bg) > 40
    scaled = [TextBox(b.text, tuple(v * scale for v in b.box), b.confidence) for b in boxes]
    mask &= ~text_mask(mask.shape, scaled, pad=1)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    area_total = mask.size
    feats = {"ink": float(mask.mean()), "rects": 0.0, "blobs": 0.0, "round_big": 0.0, "thin": 0.0, "circles": 0.0}
    for i in range(1, n):
        x, y, w, h, area = stats[i]
        fill = area / max(w * h, 1)
        if area > 0.002 * area_total and fill > 0.9 and min(w, h) >= 3:
            feats["rects"] += 1
        if 4 <= area <= 0.002 * area_total and fill > 0.55 and 0.6 < w / max(h, 1) < 1.6:
            feats["blobs"] += 1
        if area > 0.08 * area_total and 0.8 < w / max(h, 1) < 1.25 and 0.6 < fill < 0.85:
            feats["round_big"] = 1.0
        if area > 0.001 * area_total and fill < 0.15:
            feats["thin"] += 1
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    circles = cv2.HoughCircles(grey, cv2.HOUGH_GRADIENT, dp=1, minDist=10, param1=100, param2=30, minRadius=6,
                               maxRadius=40)
    feats["circles"] = float(0 if circles is None else len(circles[0]))
    return feats
