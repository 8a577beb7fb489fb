"""A parsed chart: OCR text laid out as axes, data labels, categories and legend entries, plus value reading."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from maestro_graph.experts.protocols import TextBox
from maestro_graph.numbers import numbers_in

from . import pixels, text

STOP = {"of", "the", "is", "at", "a", "an", "in", "to", "and", "or", "for", "by", "on", "value", "chart", "graph"}


@dataclass
class Name:
    """A chart text mentioned in the question: its box, where it occurs in the question, and its legend colour."""

    box: TextBox
    position: int
    colour: np.ndarray | None = None
    number: float | None = None

    @property
    def is_series(self) -> bool:
        return self.colour is not None


@dataclass
class Chart:
    arr: np.ndarray
    boxes: list[TextBox]
    axes: dict[str, text.Axis] = field(init=False)

    def __post_init__(self) -> None:
        self.boxes = text.split_tokens(self.boxes)
        self.axes = text.find_axes(self.boxes, (self.arr.shape[1], self.arr.shape[0]))

    @cached_property
    def bg(self) -> np.ndarray:
        return pixels.background(self.arr)

    @cached_property
    def labels(self) -> list[tuple[float, TextBox]]:
        return text.data_labels(self.boxes, self.axes)

    @cached_property
    def words(self) -> list[TextBox]:
        return [b for b in self.boxes if text.parse_number(b.text) is None]

    @property
    def horizontal(self) -> bool:
        """Bars grow rightwards: a numeric x axis but no numeric y axis."""
        return "x" in self.axes and "y" not in self.axes

    @property
    def value_axis(self) -> text.Axis | None:
        return self.axes.get("x" if self.horizontal else "y")

    def mentioned(self, question: str, exclude: set[float] = frozenset()) -> list[Name]:
        """Chart texts that the question names, in question order; a longer name wins over its own words."""
        q = " " + text.normalize(question) + " "
        found: list[Name] = []
        for b in self.boxes:
            t = text.normalize(b.text)
            if len(t) < 2 and not t.isdigit() or t in STOP:
                continue
            number = text.parse_number(b.text)
            if number is not None and number in exclude:
                continue
            idx = q.find(" " + t + " ")
            if idx < 0:
                continue
            colour = pixels.swatch_colour(self.arr, b, self.bg) if number is None else None
            found.append(Name(b, idx, colour, number))
        found.sort(key=lambda n: (n.position, -len(text.normalize(n.box.text)), n.colour is None))
        if self.value_axis is not None:  # axis titles and headings are not categories: keep labels in a row
            found = [n for n in found if n.is_series or n.number is not None or len(self.category_row(n)) >= 2]
        kept: list[Name] = []
        for n in found:
            start, end = n.position, n.position + len(text.normalize(n.box.text))
            inside = any(k.position <= start and end <= k.position + len(text.normalize(k.box.text)) for k in kept)
            if not inside:
                kept.append(n)
        return kept

    @cached_property
    def _ticks(self) -> list[TextBox]:
        return [t for a in self.axes.values() for t in a.ticks]

    def category_row(self, name: Name) -> list[TextBox]:
        """The labels aligned with `name` along the category axis (same row, or same column when horizontal)."""
        b = name.box
        if "x" in self.axes and not self.horizontal and b in self.axes["x"].ticks:
            return self.axes["x"].ticks
        if self.horizontal:
            return sorted([o for o in self.boxes if abs(o.box[2] - b.box[2]) < 2 * b.height and o not in self._ticks],
                          key=lambda o: o.cy)
        return sorted([o for o in self.boxes if abs(o.cy - b.cy) < 0.5 * b.height and o not in self._ticks],
                      key=lambda o: o.cx)

    def category_position(self, name: Name) -> tuple[float, float] | None:
        """(pixel along the category axis, half window) for a category label or a number on the x axis."""
        if name.number is not None and "x" in self.axes and not self.horizontal and name.box in self.axes["x"].ticks:
            return self.axes["x"].pixel(name.number), 0.01 * self.arr.shape[1]
        row = self.category_row(name)
        centres = [o.cy if self.horizontal else o.cx for o in row]
        gaps = np.diff(sorted(centres))
        spacing = float(np.median(gaps)) if len(gaps) else 0.1 * self.arr.shape[1]
        return (name.box.cy if self.horizontal else name.box.cx), 0.45 * spacing

    def read(self, series: Name | None, category: Name) -> float | None:
        """The value of `series` (None: the only series) at `category`, from the marks and the value axis."""
        axis = self.value_axis
        pos = self.category_position(category)
        if axis is None or pos is None:
            return None
        arr = self.arr.transpose(1, 0, 2) if self.horizontal else self.arr
        if series is not None:
            mask = pixels.distance(arr, series.colour) < pixels.COLOUR_MATCH
        else:
            mask = pixels.distance(arr, self.bg) > pixels.MARK_CONTRAST
        boxes = [TextBox(b.text, (b.box[1], b.box[0], b.box[3], b.box[2]), b.confidence) for b in self.boxes] \
            if self.horizontal else self.boxes
        mask &= ~pixels.text_mask(mask.shape, boxes)
        lo, hi = axis.extent
        margin = 0.1 * (hi - lo)
        ext = pixels.mark_extent(arr, axis.value, (int(lo - margin), int(hi + margin)), pos[0], pos[1], mask)
        if ext is None:
            return None
        values = [text.parse_number(t.text) for t in axis.ticks]
        base = 0.0 if min(values) <= 0 <= max(values) else min(values)
        if series is not None and ext.bottom - base > 0.03 * axis.span and ext.length > 0.03 * (hi - lo):
            return ext.top - ext.bottom  # a stacked band sitting on another series
        return ext.top

    def label_near(self, name: Name) -> float | None:
        """The data label closest to any box with the name's text (pie slices, labelled points)."""
        same = [b for b in self.words if text.normalize(b.text) == text.normalize(name.box.text)] or [name.box]
        pairs = [(np.hypot(vb[1].cx - b.cx, vb[1].cy - b.cy), vb[0]) for b in same for vb in self.labels]
        return min(pairs)[1] if pairs else None

    def value_of(self, entity: Name, context: list[Name]) -> float | None:
        """The value for `entity` given the other names in the question (its series or its category)."""
        if self.value_axis is None:
            return self.label_near(entity)
        if entity.is_series:
            cats = [c for c in context if not c.is_series]
            return self.read(entity, cats[-1]) if cats else None
        series = [s for s in context if s.is_series]
        return self.read(series[0] if series else None, entity)


def close(a: float, b: float, span: float) -> bool:
    return abs(a - b) <= max(0.05 * abs(b), 0.03 * span, 1e-9)


def stated_number(claim: str) -> float | None:
    """The value a claim states: the last number written with a decimal point or %, else the last non-year number."""
    found = numbers_in(claim)
    for pick in (lambda n: "." in n.text or n.percent, lambda n: not re.fullmatch(r"(18|19|20)\d\d", n.text),
                 lambda n: True):
        chosen = [n for n in found if pick(n)]
        if chosen:
            return chosen[-1].scaled
    return None
