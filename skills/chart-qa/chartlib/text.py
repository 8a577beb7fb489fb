"""Chart text from OCR boxes: numbers, tick-label axes (pixel -> value by a linear fit), data labels, name lookup.

OCR engines differ in granularity (RapidOCR gives one box per label, Tesseract one box per line), so boxes holding
several tokens are first split into per-token boxes by character position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np

from maestro_graph.experts.protocols import TextBox
from maestro_graph.numbers import whole_number

MIN_TICKS = 3
MAX_TICK_RESIDUAL = 0.04  # of the fitted span: tick labels sit on a straight scale


def parse_number(text: str) -> float | None:
    """A label's number ('1,200', '-5', '35%', '2.5M', '$40', suffixes applied) or None when the text is not a
    single number. OCR reads a 0 among digits as the letter O; a label written as a fraction ('3/4') is a category,
    such as a date, not a value on a scale."""
    t = text.strip().replace("O", "0") if re.fullmatch(r"[\dO.,%-]+", text.strip()) else text.strip()
    number = whole_number(t.replace(" ", ""))
    return None if number is None or number.fraction else number.scaled


def split_tokens(boxes: list[TextBox]) -> list[TextBox]:
    """Split multi-token boxes whose tokens are all numbers (a Tesseract line of tick labels), and 'Name: 35' labels,
    into one box per part by character offsets."""
    out: list[TextBox] = []
    for b in boxes:
        labelled = re.fullmatch(r"(.*\S)\s*[:=]\s*(\S+)", b.text)
        if labelled and parse_number(labelled.group(2)) is not None and parse_number(labelled.group(1)) is None:
            cut = b.box[0] + (b.box[2] - b.box[0]) * len(labelled.group(1)) / len(b.text)
            out.append(TextBox(labelled.group(1), (b.box[0], b.box[1], cut, b.box[3]), b.confidence))
            out.append(TextBox(labelled.group(2), (cut, b.box[1], b.box[2], b.box[3]), b.confidence))
            continue
        tokens = b.text.split()
        if len(tokens) < 2 or not all(parse_number(t) is not None for t in tokens):
            out.append(b)
            continue
        per_char = (b.box[2] - b.box[0]) / max(len(b.text), 1)
        pos = 0
        for tok in tokens:
            start = b.text.index(tok, pos)
            pos = start + len(tok)
            x0 = b.box[0] + start * per_char
            out.append(TextBox(tok, (x0, b.box[1], x0 + len(tok) * per_char, b.box[3]), b.confidence))
    return out


@dataclass
class Axis:
    """A numeric axis: value = slope * pixel + intercept along `direction` ('x': columns, 'y': rows)."""

    direction: str
    slope: float
    intercept: float
    ticks: list[TextBox]

    def value(self, pixel: float) -> float:
        return self.slope * pixel + self.intercept

    def pixel(self, value: float) -> float:
        return (value - self.intercept) / self.slope

    @property
    def span(self) -> float:
        values = [parse_number(t.text) for t in self.ticks]
        return max(values) - min(values)

    @property
    def extent(self) -> tuple[float, float]:
        """Pixel range covered by the tick labels along the axis direction."""
        centers = [t.cx if self.direction == "x" else t.cy for t in self.ticks]
        return min(centers), max(centers)


def _fit(group: list[TextBox], direction: str) -> Axis | None:
    pos = np.array([b.cx if direction == "x" else b.cy for b in group])
    val = np.array([parse_number(b.text) for b in group])
    if len(set(val)) < MIN_TICKS or np.ptp(pos) < 1e-6:
        return None
    slope, intercept = np.polyfit(pos, val, 1)
    residual = np.abs(slope * pos + intercept - val).max()
    if residual > MAX_TICK_RESIDUAL * np.ptp(val):
        return None
    if direction == "y" and slope >= 0 or direction == "x" and slope <= 0:
        return None  # values grow upwards / rightwards on ordinary axes
    return Axis(direction, float(slope), float(intercept),
                sorted(group, key=lambda b: b.cx if direction == "x" else b.cy))


def _aligned_groups(boxes: list[TextBox], key, tolerance: float) -> list[list[TextBox]]:
    groups: list[list[TextBox]] = []
    for b in sorted(boxes, key=key):
        if groups and abs(key(b) - key(groups[-1][-1])) <= tolerance:
            groups[-1].append(b)
        else:
            groups.append([b])
    return [g for g in groups if len(g) >= MIN_TICKS]


def find_axes(boxes: list[TextBox], size: tuple[int, int]) -> dict[str, Axis]:
    """The best x axis (numbers in one row) and y axis (numbers in one column, right-aligned) the labels support."""
    numeric = [b for b in boxes if parse_number(b.text) is not None]
    width, height = size
    found: dict[str, Axis] = {}
    for direction, key, tol in (
        ("x", lambda b: b.cy, 0.01 * height),
        ("y", lambda b: b.box[2], 0.01 * width),
        ("y", lambda b: b.cx, 0.01 * width),
    ):
        for group in _aligned_groups(numeric, key, tol):
            axis = _fit(group, direction)
            if axis and (direction not in found or len(axis.ticks) > len(found[direction].ticks)):
                found[direction] = axis
    return found


def _is_year(value: float) -> bool:
    return value == int(value) and 1800 <= value <= 2100


def tick_like(numbers: list[TextBox]) -> set[int]:
    """Ids of numbers that lie on a straight line with at least two others, evenly valued along it (tick labels of
    any axis, including slanted radar rings and secondary axes), and of year labels (categories, not data)."""
    out = {id(b) for b in numbers if _is_year(parse_number(b.text))}
    centres = np.array([(b.cx, b.cy) for b in numbers])
    values = np.array([parse_number(b.text) for b in numbers])
    for i in range(len(numbers)):
        for j in range(i + 1, len(numbers)):
            d = centres[j] - centres[i]
            length = np.hypot(*d)
            if length < 1 or values[i] == values[j]:
                continue
            offsets = np.abs((centres - centres[i]) @ np.array([-d[1], d[0]]) / length)
            tol = max(numbers[i].height, numbers[j].height) * 0.6
            members = np.flatnonzero(offsets <= tol)
            if len(members) < MIN_TICKS:
                continue
            along = (centres[members] - centres[i]) @ d / length
            vals = values[members]
            if len(set(vals)) < MIN_TICKS:
                continue
            slope, intercept = np.polyfit(along, vals, 1)
            if np.abs(slope * along + intercept - vals).max() <= MAX_TICK_RESIDUAL * np.ptp(vals):
                out.update(id(numbers[k]) for k in members)
    return out


def data_labels(boxes: list[TextBox], axes: dict[str, Axis]) -> list[tuple[float, TextBox]]:
    """Numbers printed in the chart that are not tick labels (of a found axis or any tick-like line) nor years."""
    numbers = [b for b in boxes if parse_number(b.text) is not None]
    ticks = {id(t) for axis in axes.values() for t in axis.ticks} | tick_like(numbers)
    return [(parse_number(b.text), b) for b in numbers if id(b) not in ticks]


def normalize(text: str) -> str:
    """Lower case words and numbers; a '.' survives only inside a number."""
    return re.sub(r"(?:[^a-z0-9.%+-]|\.(?!\d)|(?<!\d)\.)+", " ", text.lower()).strip()


def similarity(a: str, b: str) -> float:
    a, b = normalize(a), normalize(b)
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    return SequenceMatcher(None, a, b).ratio()


def find_name(boxes: list[TextBox], name: str, threshold: float = 0.75) -> TextBox | None:
    """The box whose text best matches `name` (whole box, or a box that contains the name as a phrase)."""
    best, best_score = None, threshold
    target = normalize(name)
    for b in boxes:
        text = normalize(b.text)
        score = similarity(text, target)
        if score < 1.0 and len(target) >= 3 and re.search(rf"(^| ){re.escape(target)}( |$)", text):
            score = max(score, 0.9)
        if score > best_score or score == best_score and best is not None and b.height > best.height:
            best, best_score = b, score
    return best


SMALL_TEXT = 14  # px: below this median label height OCR engines misread digits, so the chart is read at 2x


def chart_boxes(ocr, image) -> list[TextBox]:
    """OCR boxes of a chart, read again at twice the size when its labels are small (boxes in original pixels)."""
    boxes = ocr(image)
    heights = sorted(b.height for b in boxes)
    if not heights or heights[len(heights) // 2] >= SMALL_TEXT:
        return boxes
    big = image.resize((image.width * 2, image.height * 2))
    return [TextBox(b.text, tuple(v / 2 for v in b.box), b.confidence) for b in ocr(big)]
