"""Question answering over a parsed Chart: yes/no claims (value, comparison, highest, chart type, node links),
value look-ups, extremes and multiple choice by the closest option."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from . import pixels, text
from .chart import Chart, Name, close, stated_number

CHART_TYPES = ("node_link", "node link", "combination", "scatter", "radar", "area", "line", "pie", "box", "bar")


@dataclass
class Verdict:
    answer: str | None
    confidence: float
    evidence: str


def _yes(flag: bool, confidence: float, evidence: str) -> Verdict:
    return Verdict("Yes" if flag else "No", confidence, evidence)


def chart_type_scores(chart: Chart) -> dict[str, float]:
    """How much the picture looks like each chart type (relative scores, compared pairwise)."""
    f = pixels.shape_features(chart.arr, chart.boxes)
    has_axes = float(len(chart.axes))
    return {
        "node_link": f["circles"] / 3 - has_axes - f["rects"] / 4,
        "pie": 3 * f["round_big"] - has_axes + (f["ink"] > 0.3),
        "radar": f["thin"] / 2 - has_axes + (1 - f["round_big"]) - f["rects"] / 4,
        "scatter": f["blobs"] / 4 + has_axes - f["rects"] / 2,
        "bar": f["rects"] / 2 + has_axes,
        "box": f["rects"] / 3 + has_axes + f["thin"] / 4,
        "line": has_axes + f["thin"] / 2 + f["blobs"] / 8 - f["rects"] / 3,
        "area": has_axes + 2 * (f["ink"] > 0.25) - f["rects"] / 4,
        "combination": has_axes + min(f["rects"], 3) / 2 + min(f["thin"] + f["blobs"] / 3, 3) / 2,
    }


def _chart_type(chart: Chart, claim: str) -> Verdict | None:
    m = re.search(r"is an? ([a-z_ ]+?) (?:chart|graph|plot),? instead of (?:an? )?([a-z_ ]+?) (?:chart|graph|plot)",
                  claim)
    if not m:
        return None
    said, other = (t.strip().replace(" ", "_") for t in m.groups())
    scores = chart_type_scores(chart)
    if said not in scores:
        return _yes(False, 0.5, f"'{said}' is not a chart type I can see")
    other_score = scores.get(other, max(v for k, v in scores.items() if k != said))
    return _yes(scores[said] > other_score, 0.55, f"shape scores: {said}={scores[said]:.1f}, {other}={other_score:.1f}")


def _node_link(chart: Chart, claim: str) -> Verdict | None:
    m = re.search(r"node (.+?) (does not |doesn't )?(points? to|connects? (?:to|with)|is connected to) node (.+?)[.?]",
                  claim)
    if not m:
        return None
    a, b = text.find_name(chart.words, m.group(1)), text.find_name(chart.words, m.group(4))
    if a is None or b is None:
        return Verdict("No", 0.3, f"could not find node labels {m.group(1)!r} / {m.group(4)!r}; "
                                  "unconfirmed claims default to No")
    score, direction = pixels.node_link(chart.arr, a, b, chart.words)
    linked = score > 0.8
    if linked and m.group(3).startswith("point"):
        linked = direction >= 0
    negated = bool(m.group(2))
    return _yes(linked != negated, 0.6,
                f"edge {a.text}-{b.text}: stroke cover {score:.2f}, arrow-towards-b {direction:+.0f}")


def _split_compare(claim: str) -> tuple[str, str] | None:
    for word in (" higher than ", " greater than ", " more than ", " larger than ", " compared to ", " lower than ",
                 " less than ", " smaller than "):
        if word in claim:
            left, right = claim.split(word, 1)
            return left, right
    return None


def _compare(chart: Chart, claim: str, names: list[Name]) -> Verdict | None:
    parts = _split_compare(claim)
    if parts is None or len(names) < 2:
        return None
    left_len = len(text.normalize(parts[0]))
    left = [n for n in names if n.position <= left_len]
    right = [n for n in names if n.position > left_len]
    if not left or not right:
        return None
    b = right[0]
    same_kind = [n for n in left if n.is_series == b.is_series]
    a = same_kind[-1] if same_kind else left[-1]
    context = [n for n in names if n is not a and n is not b]
    va, vb = chart.value_of(a, context), chart.value_of(b, context)
    if va is None or vb is None:
        return None
    lower = any(w in claim for w in (" lower than ", " less than ", " smaller than "))
    flag = va < vb if lower else va > vb
    return _yes(flag, 0.6, f"{a.box.text}={va:.4g}, {b.box.text}={vb:.4g}")


def _competitors(chart: Chart, entity: Name) -> list[Name]:
    """The names an entity competes with for "highest": the other legend entries, or the other categories."""
    if entity.is_series:
        legend = [Name(b, 0, pixels.swatch_colour(chart.arr, b, chart.bg)) for b in chart.words
                  if abs(b.cy - entity.box.cy) < entity.box.height
                  or abs(b.box[0] - entity.box.box[0]) < entity.box.height]
        return [n for n in legend if n.is_series]
    return [Name(b, 0, None, text.parse_number(b.text)) for b in chart.category_row(entity)]


def _highest(chart: Chart, claim: str, names: list[Name], stated: float | None) -> Verdict | None:
    m = re.search(r"\b(highest|largest|greatest|maximum|lowest|smallest|minimum)\b", claim)
    if not m:
        return None
    low = m.group(1) in ("lowest", "smallest", "minimum")
    if chart.labels and (chart.value_axis is None or len(chart.labels) >= 3) and stated is not None:
        values = [v for v, _ in chart.labels]
        extreme = min(values) if low else max(values)
        return _yes(close(stated, extreme, 0) and abs(stated - extreme) <= 0.005 * max(abs(extreme), 1e-9), 0.65,
                    f"extreme data label {extreme:.4g} vs stated {stated:.4g}")
    if not names:
        return None
    entity = names[0]
    context = [n for n in names[1:] if n.is_series != entity.is_series]
    others = _competitors(chart, entity)
    values = {n.box.text: chart.value_of(n, context) for n in others}
    values[entity.box.text] = chart.value_of(entity, context)
    values = {k: v for k, v in values.items() if v is not None}
    if entity.box.text not in values or len(values) < 2:
        return None
    best = (min if low else max)(values, key=values.get)
    flag = best == entity.box.text
    if stated is not None and chart.value_axis is not None:
        flag = flag and close(values[best], stated, chart.value_axis.span)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in values.items())
    return _yes(flag, 0.55, f"read values: {shown}")


def _value(chart: Chart, names: list[Name], stated: float) -> Verdict | None:
    labels = [v for v, _ in chart.labels]
    if any(abs(v - stated) <= 0.005 * max(abs(stated), 1e-9) for v in labels):
        return _yes(True, 0.75, f"the stated value {stated:g} is printed in the chart")
    if len(labels) >= 3:
        return _yes(False, 0.6, f"the stated value {stated:g} is not among the printed values {sorted(labels)[:12]}")
    if not names or chart.value_axis is None:
        return None
    series = [n for n in names if n.is_series]
    cats = [n for n in names if not n.is_series]
    if not cats:
        return None
    read = chart.read(series[0] if series else None, cats[-1])
    if read is None:
        return None
    return _yes(close(read, stated, chart.value_axis.span), 0.55,
                f"read {read:.4g} at {cats[-1].box.text}, stated {stated:g}")


def judge_claim(chart: Chart, question: str) -> Verdict:
    """Yes/No for a statement about the chart; a low-confidence 'No' when the chart cannot be read for it."""
    claim = " ".join(question.split())
    lowered = claim.lower()
    for check in (_chart_type, _node_link):
        verdict = check(chart, lowered)
        if verdict is not None:
            return verdict
    stated = stated_number(claim)
    names = chart.mentioned(claim, exclude={stated} if stated is not None else set())
    compared = _compare(chart, lowered, chart.mentioned(claim))
    if compared is not None:
        return compared
    for verdict in (_highest(chart, lowered, names, stated),
                    _value(chart, names, stated) if stated is not None else None):
        if verdict is not None:
            return verdict
    return Verdict("No", 0.3, "could not read the chart for this claim; unconfirmed claims default to No")


def answer_open(chart: Chart, question: str, choices: list[str] | None) -> Verdict:
    """Value look-ups ('what is the value of S in C'), extremes ('which ... highest') and numeric multiple choice."""
    q = " ".join(question.split())
    names = chart.mentioned(q)
    m = re.search(r"\b(highest|largest|greatest|maximum|peak|most|lowest|smallest|minimum|least)\b", q.lower())
    if m and not choices:
        low = m.group(1) in ("lowest", "smallest", "minimum", "least")
        if chart.labels and chart.value_axis is None:
            value, box = (min if low else max)(chart.labels, key=lambda vb: vb[0])
            near = min(chart.words, key=lambda b: np.hypot(b.cx - box.cx, b.cy - box.cy), default=None)
            if near is not None:
                return Verdict(near.text, 0.35, f"extreme printed value {value:g} next to '{near.text}'")
    value = None
    if names:
        series = [n for n in names if n.is_series]
        cats = [n for n in names if not n.is_series]
        if cats and chart.value_axis is not None:
            value = chart.read(series[0] if series else None, cats[-1])
        elif series and chart.value_axis is None:
            value = chart.label_near(series[0])
    options = _numeric_options(q, choices)
    if value is not None and options:
        letter, option = min(options, key=lambda lo: abs(lo[1] - value))
        return Verdict(letter, 0.45, f"read {value:.4g}; closest option {option:g}")
    if value is not None:
        labels = [v for v, _ in chart.labels]
        if labels:
            snap = min(labels, key=lambda v: abs(v - value))
            if chart.value_axis is None or close(snap, value, chart.value_axis.span):
                value = snap
        return Verdict(f"{value:.4g}", 0.35, f"read {value:.4g} for {', '.join(n.box.text for n in names)}")
    return Verdict(None, 0.0, "no value, extreme or option could be read from the chart for this question")


def _numeric_options(question: str, choices: list[str] | None) -> list[tuple[str, float]]:
    """(answer, number) for options written as '(a) 0.5 (b) 2.0' in the question or as numeric choices."""
    inline = re.findall(r"\(([a-e])\)\s*(-?[\d.,]+%?)", question)
    if inline:
        return [(letter, text.parse_number(num)) for letter, num in inline if text.parse_number(num) is not None]
    return [(c, text.parse_number(c)) for c in choices or [] if text.parse_number(c) is not None]
