"""Turning a question into one operation over a parsed table and computing it exactly.

Each solver recognises its kind of question from general wording ("mean", "rate of change", "at least", "how much
more ... than", "enough to buy") and from the table's shape (price list, frequency table, stem-and-leaf, schedule,
two-way table); the first that applies answers. Every solver explains what it did, for the evidence.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from statistics import median

from maestro_graph.numbers import first_number, numbers_in

from .layout import Table
from .match import contains_words, find_mentions, number_condition, quantity_before, similarity
from .values import format_number, format_time, parse_number, parse_time

__all__ = ["Solution", "solve"]


@dataclass
class Solution:
    """A computed answer, the operation that produced it (evidence) and how sure the solver is."""

    answer: str
    operation: str
    confidence: float


@dataclass
class _Question:
    text: str
    lower: str
    choices: list[str]

    def has(self, *patterns: str) -> bool:
        return any(re.search(p, self.lower) for p in patterns)


def _labels(table: Table) -> list[str]:
    return table.column(0)


def _value_columns(table: Table) -> list[int]:
    cols = table.numeric_columns()
    return [j for j in cols if j > 0] or cols


def _is_money(table: Table, q: _Question) -> bool:
    return "$" in q.text or any("$" in c for r in table.rows for c in r) or q.has(r"\bcost", r"\bspend", r"\bmoney")


def _num(cell: str) -> Fraction | None:
    return parse_number(cell)


def _column_for(table: Table, q: _Question, candidates: list[int]) -> int | None:
    """The value column the question names (by header), else the last numeric one."""
    if not candidates:
        return None
    if table.header:
        named = find_mentions(q.text, [table.header[j] if j in candidates else "" for j in range(len(table.header))])
        if named:
            return named[0].index
    return candidates[-1]


def _fmt(value: Fraction, table: Table, q: _Question) -> str:
    return format_number(value, money=_is_money(table, q))


def _to_choice(answer: str, q: _Question) -> str:
    """The option that says the same as `answer` (same text, number or time), else `answer`."""
    if not q.choices:
        return answer
    for c in q.choices:
        if c.strip().lower() == answer.strip().lower():
            return c
    for parse in (parse_time, parse_number):
        value = parse(answer)
        if value is not None:
            for c in q.choices:
                if parse(c) == value:
                    return c
    best = max(q.choices, key=lambda c: similarity(c, answer))
    return best if similarity(best, answer) > 0.6 else answer


# ---- solvers: each returns a Solution or None when the question is not its kind ---------------------------------


def _function_relation(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"relation a function"):
        return None
    xs = [_num(c) for c in table.column(0) if _num(c) is not None]
    repeated = [x for x, n in Counter(xs).items() if n > 1]
    answer = "no" if repeated else "yes"
    why = f"x value {format_number(repeated[0])} has two y values" if repeated else "every x has one y"
    return Solution(answer, f"function test on x = {[format_number(x) for x in xs]}: {why}", 0.8)


def _linear(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"\blinear\b"):
        return None
    pairs = [(_num(r[0]), _num(r[1])) for r in table.rows if len(r) > 1]
    pairs = [p for p in pairs if None not in p]
    if len(pairs) < 3:
        return None
    slopes = {(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(pairs, pairs[1:]) if b[0] != a[0]}
    answer = "linear" if len(slopes) == 1 else "nonlinear"
    return Solution(answer, f"rates of change {sorted(format_number(s) for s in slopes)} -> {answer}", 0.8)


def _shortage(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"shortage|surplus"):
        return None
    price = parse_number(q.text[q.lower.find("price"):] if "price" in q.lower else q.text)
    rows = [r for r in table.rows if len(r) >= 3 and _num(r[0]) == price]
    if price is None or not rows:
        return None
    heads = [h.lower() for h in table.header] if len(table.header) >= 3 else ["", "demand", "suppl"]
    jd = next((j for j, h in enumerate(heads) if "demand" in h), 1)
    js = next((j for j, h in enumerate(heads) if "suppl" in h), 2)
    demanded, supplied = _num(rows[0][jd]), _num(rows[0][js])
    if demanded is None or supplied is None:
        return None
    answer = "shortage" if demanded > supplied else "surplus"
    return Solution(answer, f"at ${price}: demanded {demanded} vs supplied {supplied} -> {answer}", 0.85)


def _each_has(table: Table, q: _Question) -> Solution | None:
    m = re.search(r"each (.+?) (?:has|have|contains?) (\S+) (.+?)\. how many .+? (?:in|on|at) (\S+)", q.lower)
    if not m:
        return None
    per, count = first_number(m.group(2)), first_number(m.group(4))
    if per is None or count is None:
        return None
    value = per.value * count.value
    return Solution(format_number(value), f"{m.group(2)} per {m.group(1)} x {m.group(4)} = {value}", 0.85)


def _body_numbers(table: Table) -> list[Fraction]:
    return [v for r in table.rows for c in r[1:] if (v := _num(c)) is not None]


def _probability(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"probability"):
        return None
    rows = find_mentions(q.text, _labels(table))
    cols = find_mentions(q.text, table.header)
    if not rows or not cols:
        return None
    cell = _num(table.rows[rows[0].index][cols[0].index])
    total = sum(_body_numbers(table))
    if cell is None or not total:
        return None
    value = cell / total
    what = f"{table.rows[rows[0].index][0]} & {table.header[cols[0].index]}"
    return Solution(format_number(value, fraction=True), f"P = {what} {cell} / total {total} = {value}", 0.85)


def _fraction_of(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"what fraction"):
        return None
    rows = find_mentions(q.text, _labels(table))
    col = _column_for(table, q, _value_columns(table))
    if not rows or col is None:
        return None
    values = [_num(c) for c in table.column(col)]
    part = values[rows[-1].index]
    total = sum(v for v in values if v is not None)
    if part is None or not total:
        return None
    value = part / total
    return Solution(format_number(value, fraction=True), f"{table.rows[rows[-1].index][0]} {part} / total {total}", 0.8)


def _distribution(table: Table) -> list[tuple[Fraction, Fraction]] | None:
    """(value, count) pairs of a stem-and-leaf plot or a frequency table (numeric first column, one count column)."""
    if table.values is not None:
        return [(v, Fraction(1)) for v in table.values]
    header = " ".join(table.header).lower()
    cols = table.numeric_columns()
    if "frequency" in header and len(cols) >= 2 and cols[0] == 0:
        pairs = [(_num(r[0]), _num(r[cols[-1]])) for r in table.rows if len(r) > cols[-1]]
        return [(v, n) for v, n in pairs if v is not None and n is not None]
    return None


def _counting(table: Table, q: _Question) -> Solution | None:
    dist = _distribution(table)
    if dist is None:
        return None
    condition = number_condition(q.text)
    if condition and q.has(r"how many"):
        text, pred = condition
        total = sum(n for v, n in dist if pred(v))
        return Solution(format_number(total), f"count of values {text}: {total}", 0.8)
    if q.has(r"in all|in total|altogether") and q.has(r"how many"):
        total = sum(n for _, n in dist)
        return Solution(format_number(total), f"sum of counts = {total}", 0.75)
    if q.has(r"which number .*(fewest|least)"):
        v = min(dist, key=lambda p: p[1])[0]
        return Solution(format_number(v), "value with the smallest count", 0.7)
    if q.has(r"which number .*(most|greatest)"):
        v = max(dist, key=lambda p: p[1])[0]
        return Solution(format_number(v), "value with the largest count", 0.7)
    if table.values is None and q.has(r"how many"):
        counts = dict(dist)
        numbers = [n.value for n in numbers_in(q.text[q.lower.rfind("how many"):])]
        asked = numbers[-1] if numbers else None
        if asked in counts:
            return Solution(format_number(counts[asked]), f"frequency of {format_number(asked)}", 0.75)
    return None


_STATS = {
    "mean": lambda v: sum(v) / len(v),
    "median": lambda v: Fraction(median(v)),
    "mode": lambda v: Counter(v).most_common(1)[0][0],
    "range": lambda v: max(v) - min(v),
}


def _values_for_stats(table: Table, q: _Question) -> list[Fraction]:
    dist = _distribution(table)
    if dist is not None and table.values is not None:
        return [v for v, _ in dist]
    col = _column_for(table, q, _value_columns(table))
    return [] if col is None else [v for c in table.column(col) if (v := _num(c)) is not None]


def _statistics(table: Table, q: _Question) -> Solution | None:
    name = next((s for s in _STATS if re.search(rf"\b(the )?{s}\b", q.lower)), None)
    extreme = re.search(r"(largest|greatest|highest|smallest|fewest|lowest|least) number", q.lower)
    if not name and not (extreme and not q.choices):
        return None
    values = _values_for_stats(table, q)
    if not values:
        return None
    if name:
        value = _STATS[name](values)
    else:
        value = max(values) if extreme.group(1) in ("largest", "greatest", "highest") else min(values)
        name = extreme.group(1)
    shown = ", ".join(format_number(v) for v in values)
    return Solution(format_number(value), f"{name} of [{shown}] = {format_number(value)}", 0.8)


def _lookup(table: Table, row: int, col: int) -> Fraction | None:
    cells = table.rows[row]
    return _num(cells[col]) if col < len(cells) else None


def _pick_column(table: Table, q: _Question, skip: tuple[int, ...] = ()) -> int | None:
    cols = [j for j in _value_columns(table) if j not in skip]
    return _column_for(table, q, cols)


def _rate_of_change(table: Table, q: _Question) -> Solution | None:
    m = re.search(r"rate of change between (.+?) and (.+?)[?.]", q.text, re.IGNORECASE)
    if not m:
        return None
    labels = _labels(table)
    ends = []
    for name in m.groups():
        best = max(range(len(labels)), key=lambda i: similarity(labels[i], name), default=None)
        if best is None or similarity(labels[best], name) < 0.8:
            return None
        ends.append(best)
    col = _pick_column(table, q, skip=(0,))
    if col is None:
        return None
    a, b = _lookup(table, ends[0], col), _lookup(table, ends[1], col)
    if a is None or b is None:
        return None
    return Solution(_fmt(b - a, table, q), f"{m.group(2)} {b} - {m.group(1)} {a} = {b - a}", 0.85)


def _after_taxes(table: Table, q: _Question) -> Solution | None:
    if not q.has(r"after taxes|net income|net pay|take-home"):
        return None
    values = [v for r in [table.header] + table.rows for c in r if "$" in c and (v := _num(c)) is not None]
    if len(values) < 2:
        return None
    value = values[0] - sum(values[1:])
    return Solution(_fmt(value, table, q), f"{values[0]} minus {[float(v) for v in values[1:]]} = {value}", 0.7)


def _schedule(table: Table, q: _Question) -> Solution | None:
    if not any(parse_time(c) is not None for r in table.rows for c in r):
        return None
    asked = parse_time(q.text)
    rows = find_mentions(q.text, _labels(table))
    if asked is not None and rows and q.has(r"\bnext\b"):
        row = table.rows[rows[0].index]
        times = [t for c in row[1:] if (t := parse_time(c)) is not None]
        if asked in times[:-1]:  # the cell to the right: schedules run left to right, even past midnight
            after = times[times.index(asked) + 1]
            return Solution(_to_choice(format_time(after), q), f"row {row[0]}: after {format_time(asked)}", 0.75)
    if asked is not None:
        col = _column_for(table, q, list(range(1, table.width))) if table.header else None
        for r in table.rows:
            cells = [r[col]] if col is not None and col < len(r) else r[1:]
            if any(parse_time(c) == asked for c in cells):
                return Solution(_to_choice(r[0], q), f"row with {format_time(asked)}: {r[0]}", 0.75)
        return None
    if rows and table.header:
        col = _column_for(table, q, list(range(1, table.width)))
        if col is not None and col < len(table.rows[rows[0].index]):
            cell = table.rows[rows[0].index][col]
            return Solution(_to_choice(cell, q), f"{table.rows[rows[0].index][0]} / {table.header[col]}: {cell}", 0.75)
    return None


def _choose_extreme(table: Table, q: _Question) -> Solution | None:
    """Which option has the most/least: options matched to row labels, their values compared."""
    if not q.choices or not q.has(r"\b(most|least|fewest|highest|lowest|largest|smallest|more|less|fewer|greater|"
                                  r"closer|farther|further)\b"):
        return None
    labels = _labels(table)
    index = {}
    for c in q.choices:
        best = max(range(len(labels)), key=lambda i: similarity(labels[i], c), default=None)
        if best is not None and max(similarity(labels[best], c), 0.9 * contains_words(labels[best], c)) >= 0.7:
            index[c] = best
    unlabeled = [i for i, label in enumerate(labels) if not label]
    missing = [c for c in q.choices if c not in index]
    if len(missing) == 1 and len(unlabeled) == 1:  # OCR lost one label: the one unnamed row is the one option left
        index[missing[0]] = unlabeled[0]
    elif missing:
        return None
    col = _pick_column(table, q, skip=(0,))
    if col is None:
        return None
    values = {c: v for c, i in index.items() if (v := _lookup(table, i, col)) is not None}
    unread = len(q.choices) - len(values)
    if unread > 1 or len(values) < 2:
        return None
    if min(values.values()) < 0 < max(values.values()) or q.has(r"closer|farther|further"):
        values = {c: abs(v) for c, v in values.items()}
    smallest = q.has(r"\b(least|fewest|lowest|smallest|less|fewer|closer)\b")
    pick = (min if smallest else max)(values, key=values.get)
    shown = ", ".join(f"{c}={format_number(v)}" for c, v in values.items())
    unsure = f" ({unread} option unread)" if unread else ""
    return Solution(pick, f"{'min' if smallest else 'max'} of {shown}{unsure}", 0.4 if unread else 0.8)


def _named_cells(table: Table, q: _Question) -> list[tuple[str, Fraction]] | None:
    """Cells the question names, in its order: several rows in one column, one row in several columns, or one
    row (all its value columns added up when it asks "how many" and names no column)."""
    rows = find_mentions(q.text, _labels(table))
    cols = [c for c in find_mentions(q.text, table.header) if c.index > 0] if table.header else []
    if not rows:
        return None
    first = table.rows[rows[0].index]
    if len(rows) == 1 and len(cols) >= 2:
        cells = [(table.header[c.index], _lookup(table, rows[0].index, c.index)) for c in cols]
    elif len(rows) == 1 and not cols and len(_value_columns(table)) > 1 and q.has(r"how many"):
        parts = [_lookup(table, rows[0].index, j) for j in _value_columns(table)]
        cells = [(first[0], None if None in parts else sum(parts))]
    else:
        col = cols[0].index if cols else _pick_column(table, q, skip=(0,))
        if col is None:
            return None
        cells = [(table.rows[m.index][0], _lookup(table, m.index, col)) for m in rows]
    return None if any(v is None for _, v in cells) else cells


def _money_in_question(q: _Question) -> Fraction | None:
    m = re.search(r"has (\$\s?[\d,]+(?:\.\d+)?)", q.text)
    return first_number(m.group(1)).value if m else None


def _purchase(table: Table, q: _Question) -> Solution | None:
    """Price lists: total cost of the items (times quantities), change left, enough money, price differences."""
    if not any("$" in c for r in table.rows for c in r[1:]):
        return None
    if not q.has(r"\bbuy|\bbought|\bspen[dt]|cost|purchased?|\bneed"):
        return None
    mentions = find_mentions(q.text, _labels(table))
    col = _pick_column(table, q, skip=(0,))
    if not mentions or col is None:
        return None
    prices = [_lookup(table, m.index, col) for m in mentions]
    if any(p is None for p in prices):
        return None
    names = [table.rows[m.index][0] for m in mentions]
    if q.has(r"how much more") and len(mentions) != 2:
        return None
    if q.has(r"how much more"):
        value = prices[0] - prices[1]
        return Solution(_fmt(value, table, q), f"{names[0]} {prices[0]} - {names[1]} {prices[1]} = {value}", 0.85)
    limits = [0] + [m.end for m in mentions[:-1]]
    quantities = [quantity_before(q.text, m.start, lim) for m, lim in zip(mentions, limits)]
    total = sum(n * p for n, p in zip(quantities, prices))
    parts = " + ".join(f"{format_number(n)} x {names[i]} {format_number(prices[i], money=True)}"
                       for i, n in enumerate(quantities))
    money = _money_in_question(q)
    if money is not None and q.has(r"enough"):
        answer = "yes" if money >= total else "no"
        return Solution(answer, f"{parts} = {format_number(total, money=True)} vs has {money} -> {answer}", 0.85)
    if money is not None and q.has(r"\bleft\b"):
        value = money - total
        return Solution(_fmt(value, table, q), f"{money} - ({parts}) = {value}", 0.85)
    return Solution(format_number(total, money=True), f"{parts} = {format_number(total, money=True)}", 0.85)


def _difference_or_sum(table: Table, q: _Question) -> Solution | None:
    cells = _named_cells(table, q)
    if not cells:
        return None
    if len(cells) >= 2 and q.has(r"how (much|many) more|how (much|many) less|difference"):
        value = cells[0][1] - cells[1][1]
        if q.has(r"how (much|many) less"):
            value = -value
        return Solution(_fmt(value, table, q), f"{cells[0][0]} {cells[0][1]} - {cells[1][0]} {cells[1][1]}", 0.8)
    if len(cells) >= 2:
        value = sum(v for _, v in cells)
        shown = " + ".join(f"{n} {v}" for n, v in cells)
        return Solution(_fmt(value, table, q), f"{shown} = {value}", 0.75)
    name, value = cells[0]
    return Solution(_fmt(value, table, q), f"lookup {name}: {value}", 0.7)


_SOLVERS = [
    _function_relation,
    _linear,
    _shortage,
    _each_has,
    _probability,
    _fraction_of,
    _rate_of_change,
    _counting,
    _statistics,
    _schedule,
    _after_taxes,
    _purchase,
    _choose_extreme,
    _difference_or_sum,
]


def solve(table: Table, question: str, choices: list[str] | None) -> Solution | None:
    """The first solver that recognises the question and can compute it on this table, else None."""
    q = _Question(question, question.lower(), list(choices or []))
    for solver in _SOLVERS:
        solution = solver(table, q)
        if solution is not None:
            return solution
    return None
