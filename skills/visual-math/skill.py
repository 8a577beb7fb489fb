"""Tier-1 visual math: read the figure's labels and numbers, then measure the figure or reason from the givens.

Two routes, chosen by what the question asks:
- figure questions naming points (estimate angle ABC, line AB vs CD, area ratio, "there is a triangle ABC",
  "AB is a diameter"): OCR the labels, snap them to the drawing and measure (see mathlib/figure.py);
- computed questions: numbers from the question and the figure, options valued with the calculator, and the option
  reachable through the cheapest general geometric relation is the answer (see mathlib/relations.py). The givens
  are read from the question without its options and from the figure: a relation among the options themselves
  ("9/3 = 3" for options 3, 7, 9) is no evidence, so with no given there is only the marked, low-confidence prior.
Free-form questions without options get no answer unless a relation is certain, which it never is here: we say so.
"""

from __future__ import annotations

import math
import re
import statistics

from maestro_graph.choices import question_stem
from maestro_graph.errors import ExpertError
from maestro_graph.numbers import parse_number
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

from .mathlib import figure as figures
from .mathlib import questions, relations

FREE_FORM = "free-form question: no option to check a relation against"
_UNITS = re.compile(r"\s*(?:°|度|\^\\circ|\\circ|[a-zA-Z]{1,3}[23²³]?|平方\S*)\s*$")
_FIGURE_KINDS = {"angle", "length", "area", "polygon", "diameter"}


def declines(request: str, choices: list[str] | None) -> str | None:
    """A question written out that asks to compute a value and offers no options is one no relation answers here
    (see above): declined before the OCR model runs. A question given only in the figure is read from the image
    first, so it is never declined from its (empty) text."""
    if not request.strip():
        return None
    question = questions.parse_question(request, choices)
    return FREE_FORM if question.kind == "compute" and not question.options else None


def run(ctx: SkillContext) -> SkillResult:
    page = ctx.use("ocr", image=ctx.image)
    question = questions.parse_question(ctx.question, ctx.choices, figure_text=page.text)
    if question.kind in _FIGURE_KINDS:
        figure = figures.read_figure(ctx.image, page.boxes)
        return _answer_figure(question, figure)
    return _answer_compute(ctx, question, page.text)


# ---- figure questions -------------------------------------------------------------------------------------------

def _answer_figure(question, figure) -> SkillResult:
    names = [n for n in question.groups if n and n.isupper()]
    missing = sorted({c for n in names for c in n} - set(figure.points))
    found = ", ".join(f"{k}({x:.0f},{y:.0f})" for k, (x, y) in sorted(figure.points.items()))
    if missing:
        return _figure_prior(question, f"labels found: {found or 'none'}; not found: {''.join(missing)}")
    if question.kind == "polygon":
        negated, shape, corners = question.groups
        exists = figure.has_polygon(corners)
        sides = ", ".join(f"{corners[i - 1]}{corners[i]} {figure.drawn_share(corners[i - 1], corners[i]):.0%}"
                          for i in range(len(corners)))
        evidence = f"{shape} {corners}: sides drawn {sides} -> {'exists' if exists else 'not drawn'}"
        return SkillResult(evidence, _true_false(exists != bool(negated)), 0.6)
    if question.kind == "diameter":
        segment, negated, role = question.groups
        holds, detail = _diameter_or_radius(figure, segment, role)
        return SkillResult(f"{role} {segment}: {detail}", _true_false(holds != bool(negated)), 0.55)
    if question.kind == "angle":
        a, v, b = question.groups[0]
        measured = figure.angle(a, v, b)
        return _nearest_option(question, measured, f"angle {a}{v}{b} measures {measured:.0f}° (points {found})",
                               log_scale=False)
    if question.kind == "length":
        first, second = question.groups
        ratio = figure.length(*first) / max(figure.length(*second), 1e-9)
        return _nearest_option(question, ratio, f"{first}/{second} = {ratio:.2f} measured (points {found})")
    first, second = question.groups
    ratio = figure.area(first) / max(figure.area(second), 1e-9)
    return _nearest_option(question, ratio, f"area {first}/{second} = {ratio:.2f} measured (points {found})")


def _diameter_or_radius(figure, segment: str, role: str) -> tuple[bool, str]:
    """A diameter is drawn and passes through the centre at its middle; a radius is drawn and ends at the centre.
    The centre is the point labelled O when there is one."""
    a, b = segment
    if not figure.is_drawn(a, b):
        return False, f"segment not drawn ({figure.drawn_share(a, b):.0%} on ink)"
    centre = figure.points.get("O")
    if centre is None:
        return False, "drawn, but no centre O labelled to check against"
    (ax, ay), (bx, by) = figure.points[a], figure.points[b]
    length = max(math.dist((ax, ay), (bx, by)), 1e-9)
    if role.lower() == "radius":
        gap = min(math.dist(centre, (ax, ay)), math.dist(centre, (bx, by))) / length
        return gap < 0.15, f"drawn; nearest end is {gap:.0%} of its length from O"
    gap = math.dist(centre, ((ax + bx) / 2, (ay + by) / 2)) / length
    return gap < 0.12, f"drawn; its midpoint is {gap:.0%} of its length from O"


def _figure_prior(question, evidence: str) -> SkillResult:
    """Labels missing: for yes/no questions about named shapes, a set of named points is more often not a drawn
    shape than one; for estimates there is no basis to choose."""
    if question.kind in {"polygon", "diameter"}:
        negated = bool(question.groups[0] if question.kind == "polygon" else question.groups[1])
        return SkillResult(f"{evidence}; cannot measure, prior: named shapes are usually not drawn",
                           _true_false(negated), 0.2)
    return SkillResult(f"{evidence}; cannot measure the figure", None, 0.0)


def _nearest_option(question, measured: float, evidence: str, log_scale: bool = True) -> SkillResult:
    best, best_gap = None, math.inf
    for key, text in question.options:
        values = questions.numbers_in(text)
        if not values or (log_scale and values[0] <= 0):
            continue
        gap = abs(math.log(measured / values[0])) if log_scale else abs(measured - values[0])
        if gap < best_gap:
            best, best_gap = (key, text), gap
    if best is None:
        return SkillResult(f"{evidence}; no numeric options", None, 0.0)
    return SkillResult(f"{evidence}; nearest option ({best[0]}) {best[1]}", best[0], 0.55)


def _true_false(value: bool) -> str:
    return "True" if value else "False"


# ---- computed questions -----------------------------------------------------------------------------------------

def _option_value(ctx: SkillContext, text: str) -> float | None:
    """An option's number: units and degree marks dropped, LaTeX and roots evaluated by the calculator."""
    core = _UNITS.sub("", text.replace("$", "").strip())
    if not core or not re.search(r"\d", core):
        return None
    try:
        return parse_number(ctx.use("calculator", expression=core))
    except ExpertError:
        return None


def _answer_compute(ctx: SkillContext, question, figure_text: str) -> SkillResult:
    own_text = question_stem(question.text) if question.text != figure_text else ""
    # single-glyph readings in a figure are mostly point labels misread (O as 0, S as 5): keep longer numbers
    figure_numbers = questions.numbers_in(" ".join(w for w in questions.without_listed_options(figure_text).split()
                                                   if len(w) > 1))
    givens = questions.numbers_in(own_text) + [v for v in figure_numbers if v not in questions.numbers_in(own_text)]
    if not question.options:
        return SkillResult(f"givens {givens}; {FREE_FORM}", None, 0.0)
    values = [_option_value(ctx, text) for _, text in question.options]
    pick = relations.best_option(values, relations.derive(givens, question.text))
    listed = "; ".join(f"{k}={v:g}" for (k, _), v in zip(question.options, values) if v is not None)
    if pick is not None:
        index, derivation, ways = pick
        checked = ctx.use("calculator", expression=derivation.formula)
        key, text = question.options[index]
        confidence = 0.45 if derivation.cost <= 2 else 0.3
        return SkillResult(f"givens {givens}; options {listed}; {derivation.formula} = {checked} matches {text} "
                           f"(relation cost {derivation.cost:g}, {ways} ways)", key, confidence)
    return _option_prior(question, values, f"givens {givens}; options {listed or 'not numeric'}; no relation fits")


def _option_prior(question, values: list[float | None], evidence: str) -> SkillResult:
    """No relation reaches any option: answer the median-valued option (distractors tend to bracket the key), or
    for non-numeric options the most detailed one; both are test-taking priors, hence the low confidence."""
    numeric = [(v, i) for i, v in enumerate(values) if v is not None]
    if len(numeric) >= 3:
        median = statistics.median_low([v for v, _ in numeric])
        index = next(i for v, i in numeric if v == median)
        return SkillResult(f"{evidence}; prior: median option", question.options[index][0], 0.15)
    index = max(range(len(question.options)), key=lambda i: len(question.options[i][1]))
    return SkillResult(f"{evidence}; prior: most detailed option", question.options[index][0], 0.1)
