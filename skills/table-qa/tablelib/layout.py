"""Rebuilding a table (title, header, rows and columns) from OCR boxes by their geometry.

Rows are boxes whose vertical centres line up. Columns are found from the boxes of multi-cell rows, narrowest
first, so that numbers (which sit inside one column) define the columns and wide spanning boxes (titles, merged
headers) do not glue two columns together; a "column" seen in one row only is a title's word. A stem-and-leaf plot is
recognised by its header and unrolled into its values. A second OCR reading can fill cells the first one missed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from maestro_graph.experts.protocols import TextBox
from maestro_graph.numbers import numbers_in

from .values import TIME_RE, parse_number, parse_time

__all__ = ["Table", "build_table", "merge_readings"]

_OVERLAP = 0.3  # share of the narrower box's width two boxes must share to sit in one column
_YEAR_RANGE = (1800, 2100)
_HEADER_SEARCH = 3  # most header lines above the first row of values


@dataclass
class Table:
    """Cells as text (`""` when empty). `values` holds the data of a stem-and-leaf plot (None otherwise)."""

    title: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    values: list[Fraction] | None = None

    @property
    def width(self) -> int:
        return max([len(self.header)] + [len(r) for r in self.rows] + [0])

    @property
    def complete(self) -> bool:
        """At least two columns and two rows and no empty body cell: a second reading would not add anything."""
        return self.width >= 2 and len(self.rows) >= 2 and all(c for r in self.rows for c in r)

    def column(self, j: int) -> list[str]:
        return [r[j] if j < len(r) else "" for r in self.rows]

    def numeric_columns(self) -> list[int]:
        """Columns whose body cells are mostly numbers (not clock times)."""
        out = []
        for j in range(self.width):
            cells = [c for c in self.column(j) if c and c != "?"]
            nums = [c for c in cells if parse_number(c) is not None]
            if cells and len(nums) >= 0.6 * len(cells):
                out.append(j)
        return out

    def describe(self) -> str:
        """A compact text rendering for evidence: title, header, then one line per row."""
        parts = [f"title: {self.title}"] if self.title else []
        if self.values is not None:
            parts.append("stem-and-leaf values: " + ", ".join(str(v) for v in self.values))
            return "; ".join(parts)
        if self.header:
            parts.append("header: " + " | ".join(self.header))
        parts += [" | ".join(r) for r in self.rows]
        return "; ".join(parts)


def _clean(text: str) -> str:
    """Cell text without the grid-line and quote marks OCR reads at cell borders ("|Finn", "'Denver", "Clubs |")."""
    text = re.sub(r"(?<!\w)[|‘’'“”\"!_—]+|[|‘’“”\"_—:;]+(?!\w)", " ", text)
    return " ".join(w for w in text.split() if w == "?" or any(ch.isalnum() for ch in w))


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Shared width as a share of the narrower interval."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    return inter / max(1.0, min(a[1] - a[0], b[1] - b[0]))


def _find_columns(rows: list[list[TextBox]]) -> list[tuple[float, float]]:
    """Column x-intervals from the boxes of rows with two or more boxes, narrowest boxes first."""
    columns: list[list] = []  # [x0, x1, set(row ids)]
    candidates = [(b, i) for i, row in enumerate(rows) if len(row) >= 2 for b in row]
    for box, row_id in sorted(candidates, key=lambda c: c[0].box[2] - c[0].box[0]):
        span = (box.box[0], box.box[2])
        hits = [c for c in columns if _overlap(span, (c[0], c[1])) > _OVERLAP]
        if not hits:
            columns.append([span[0], span[1], {row_id}])
        elif len(hits) == 1 and row_id not in hits[0][2]:
            hits[0][0], hits[0][1] = min(hits[0][0], span[0]), max(hits[0][1], span[1])
            hits[0][2].add(row_id)
    columns.sort(key=lambda c: c[0])
    merged: list[list] = []
    for c in columns:  # extension can make neighbours overlap: one column after all
        if merged and c[0] < merged[-1][1] and not (c[2] & merged[-1][2]):
            merged[-1][1] = max(merged[-1][1], c[1])
            merged[-1][2] |= c[2]
        else:
            merged.append(list(c))
    supported = [c for c in merged if len(c[2]) >= 2] or merged  # a one-row "column" is a title's word
    return [(c[0], c[1]) for c in supported] or [(0.0, float("inf"))]


def _trailing_value(cell: str) -> int | None:
    """Where a value that ends the cell after white space starts (a clock time, else a number), or None."""
    times = list(TIME_RE.finditer(cell))
    if times and times[-1].end() == len(cell) and times[-1].start() and cell[times[-1].start() - 1].isspace():
        return times[-1].start()
    numbers = numbers_in(cell)
    last = numbers[-1] if numbers else None
    if last and last.end == len(cell) and last.start and cell[last.start - 1].isspace():
        return last.start
    return None


def _split_merged(cells: list[str], numeric: list[bool]) -> list[str]:
    """Move a trailing value into the empty cell on its right when OCR read two cells as one box
    ("Medical research $4" | "", "8:30 A.M. 9:35 A.M." | "")."""
    cells = list(cells)
    for j in range(len(cells) - 2, -1, -1):
        start = _trailing_value(cells[j])
        if start is not None and not cells[j + 1] and numeric[j + 1]:
            cells[j], cells[j + 1] = cells[j][:start].strip(), cells[j][start:].strip()
    return cells


def _column_of(box: TextBox, columns: list[tuple[float, float]]) -> int:
    span = (box.box[0], box.box[2])
    scores = [min(span[1], c[1]) - max(span[0], c[0]) for c in columns]
    best = max(range(len(columns)), key=lambda j: scores[j])
    if scores[best] <= 0:  # in a gap: nearest column by centre
        best = min(range(len(columns)), key=lambda j: abs(box.cx - (columns[j][0] + columns[j][1]) / 2))
    return best


def _spans(box: TextBox, columns: list[tuple[float, float]]) -> bool:
    return sum(1 for c in columns if _overlap((box.box[0], box.box[2]), c) > _OVERLAP) >= 2


def _is_value(cell: str) -> bool:
    return parse_number(cell) is not None or parse_time(cell) is not None


def _is_year(cell: str) -> bool:
    return bool(re.fullmatch(r"\d{4}", cell.strip())) and _YEAR_RANGE[0] <= int(cell) <= _YEAR_RANGE[1]


def _is_data(cell: str) -> bool:
    """A cell that states one value ("$4 per lb", "19,600", "8:30 A.M."), not a label that holds numbers
    ("Under age 12", "13 to 30 years old") nor a year used as a column name."""
    if parse_time(cell) is not None:
        return True
    numbers = numbers_in(cell)
    return len(numbers) == 1 and not cell[:numbers[0].start].strip() and not _is_year(cell)


def _digits(text: str) -> list[int]:
    return [int(ch) for ch in text if ch.isdigit()]


def _stem_leaf_values(rows: list[list[str]]) -> list[Fraction]:
    """Unroll stem | leaf rows into values; a missing stem follows from its neighbours (stems count up by one)."""
    stems: list[int | None] = [int("".join(map(str, _digits(r[0])))) if _digits(r[0]) else None for r in rows]
    for i in range(len(stems)):
        if stems[i] is None:
            before = next((stems[k] + (i - k) for k in range(i - 1, -1, -1) if stems[k] is not None), None)
            after = next((stems[k] - (k - i) for k in range(i + 1, len(stems)) if stems[k] is not None), None)
            stems[i] = before if before is not None else after
    values = []
    for stem, row in zip(stems, rows):
        if stem is not None:
            values += [Fraction(stem * 10 + leaf) for leaf in _digits(" ".join(row[1:]))]
    return sorted(values)


def _intersects(a: TextBox, b: TextBox) -> bool:
    return min(a.box[2], b.box[2]) > max(a.box[0], b.box[0]) and min(a.box[3], b.box[3]) > max(a.box[1], b.box[1])


def merge_readings(base: list[TextBox], extra: list[TextBox]) -> list[TextBox]:
    """`base` plus the boxes of a second reading that lie where `base` found nothing (cells it missed)."""
    return base + [b for b in extra if not any(_intersects(b, a) for a in base)]


def _rows(boxes: list[TextBox]) -> list[list[TextBox]]:
    """Boxes grouped into table rows, top to bottom, each left to right: a box joins the row above when its
    vertical centre lies within that row's extent or the row's centre lies within the box."""
    rows: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: b.cy):
        if rows:
            top, bottom = min(b.box[1] for b in rows[-1]), max(b.box[3] for b in rows[-1])
            centre = sum(b.cy for b in rows[-1]) / len(rows[-1])
            if top <= box.cy <= bottom or box.box[1] <= centre <= box.box[3]:
                rows[-1].append(box)
                continue
        rows.append([box])
    return [sorted(r, key=lambda b: b.box[0]) for r in rows]


def build_table(boxes: list[TextBox]) -> Table:
    """The table drawn by OCR `boxes` (pixel boxes of one image)."""
    lines = _rows(boxes)
    if not lines:
        return Table()
    columns = _find_columns(lines)
    grid: list[list[str]] = []
    for line in lines:
        if len(line) == 1 and len(columns) > 1 and _spans(line[0], columns):
            grid.append([_clean(line[0].text)])  # a spanning line: title or caption
            continue
        cells = [""] * len(columns)
        for box in line:
            j = _column_of(box, columns)
            cells[j] = f"{cells[j]} {_clean(box.text)}".strip()
        grid.append(cells)
    numeric = [sum(1 for r in grid if j < len(r) and _is_value(r[j])) >= 2 for j in range(len(columns))]
    grid = [_split_merged(r, numeric) if len(r) == len(columns) else r for r in grid]
    stem_row = next((i for i, r in enumerate(grid) if re.search(r"stem.*leaf", " ".join(r), re.IGNORECASE)), None)
    if stem_row is not None:
        title = " ".join(c for r in grid[:stem_row] for c in r if c)
        body = [r + [""] * (2 - len(r)) for r in grid[stem_row + 1:]]
        return Table(title=title, header=["Stem", "Leaf"], rows=body, values=_stem_leaf_values(body))
    title_parts = []
    while len(grid) > 1 and len(columns) > 1 and len([c for c in grid[0] if c]) == 1:
        text = next(c for c in grid[0] if c)
        if _is_data(text):
            break
        title_parts.append(text)
        grid = grid[1:]
    # the rows above the first row of values (after the title) are the header; a header cell may wrap onto
    # several lines, so they are joined column by column
    first_data = next((k for k, r in enumerate(grid) if any(_is_data(c) for c in r)), None)
    if first_data is None or not 1 <= first_data <= _HEADER_SEARCH:
        return Table(title=" ".join(title_parts), rows=grid)
    header = [" ".join(r[j] for r in grid[:first_data] if j < len(r) and r[j]) for j in range(len(columns))]
    return Table(title=" ".join(title_parts), header=header, rows=grid[first_data:])
