"""Counting and geometric perception on drawn figures: shapes, line crossings, grid size, circle contact.

The question says what to measure (see question.py); the pair's `vision-cv` model measures it; the answer is written
the way the question asks (a number, {n}, "(rows,columns)", Yes/No), or as the matching option when there are choices.
A yes/no claim about the count ("Are there more than 5 circles?") is answered by whether the count makes it true,
and options that are claims ("There are 7 circles") by the one the count makes true.
"""

from __future__ import annotations

from maestro_graph.experts.protocols import CONTACT_TOLERANCE_PX
from maestro_graph.numbers import numbers_in, parse_number
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

from .question import Request, claim_in, parse

NO_MEASURE = (
    "counting: the question asks for no count or check this skill knows "
    "(shapes, line crossings, rows/columns, circle contact)"
)


def declines(request: str, choices: list[str] | None) -> str | None:
    """A question that asks for nothing this skill measures is declined before the model runs."""
    return NO_MEASURE if parse(request, choices) is None else None


def run(ctx: SkillContext) -> SkillResult:
    request = parse(ctx.request, ctx.choices)
    if request is None:
        return SkillResult(evidence=NO_MEASURE, answer=None, confidence=0.0)
    measure = {"grid": _grid, "crossings": _crossings, "contact": _contact, "shapes": _shapes}[request.measure]
    evidence, answer, confidence = measure(ctx, request)
    count = parse_number(answer) if answer is not None else None
    if request.claim is not None and count is not None:
        holds = request.claim.holds(int(count))
        evidence += f"; so {request.claim.op} {request.claim.value} is {'true' if holds else 'false'}"
        answer = "Yes" if holds else "No"
    if answer is not None and ctx.choices:
        answer, confidence = _as_choice(answer, ctx.choices, confidence)
    return SkillResult(evidence=evidence, answer=answer, confidence=confidence)


def _number(value: int, request: Request) -> str:
    return f"{{{value}}}" if request.braces else str(value)


def _grid(ctx: SkillContext, request: Request) -> tuple[str, str | None, float]:
    grid = ctx.model.grid(ctx.image)
    if grid.rows == 0 or grid.columns == 0:
        return "no ruled grid found (need full-width horizontal and full-height vertical rules)", None, 0.0
    values = {"rows": grid.rows, "columns": grid.columns, "cells": grid.rows * grid.columns}
    evidence = f"grid of {grid.rows} rows x {grid.columns} columns ({len(grid.row_rules)} horizontal and " \
               f"{len(grid.column_rules)} vertical rules)"
    parts = [p for p in request.grid_parts if p != "cells"] if len(request.grid_parts) > 1 else request.grid_parts
    if len(parts) == 1:
        return evidence, _number(values[parts[0]], request), 0.85
    return evidence, "(" + ",".join(str(values[p]) for p in parts) + ")", 0.85


def _crossings(ctx: SkillContext, request: Request) -> tuple[str, str | None, float]:
    colors = list(request.colors[:2])
    if len(colors) < 2:  # the question names fewer than two colours: take the figure's main colours
        main = [c.name for c in ctx.model.colors(ctx.image) if c.name not in ("white", "black", "gray")]
        colors += [c for c in main if c not in colors][: 2 - len(colors)]
    if len(colors) < 2:
        return "fewer than two line colours in the figure", None, 0.0
    found = ctx.model.line_crossings(ctx.image, colors[0], colors[1])
    where = ", ".join(f"({c.x:.0f},{c.y:.0f})" for c in found)
    evidence = f"{colors[0]} and {colors[1]} lines meet {len(found)} time(s)" + (f" at {where}" if where else "")
    return evidence, _number(len(found), request), 0.8


def _contact(ctx: SkillContext, request: Request) -> tuple[str, str | None, float]:
    pairs = ctx.model.circle_pairs(ctx.image)
    if not pairs:
        return "fewer than two circles found", None, 0.0
    pair = pairs[0]
    verdict = pair.overlapping if request.overlap else pair.touching
    relation = "overlap" if pair.overlapping else "touch (tangent)" if pair.touching else "are apart"
    a, b = pair.first, pair.second
    evidence = (f"closest circles ({a.color} r={a.r:.1f}, {b.color} r={b.r:.1f} px) {relation}: "
                f"gap between rims {pair.gap:.1f} px")
    clear = abs(pair.gap) > 3 * CONTACT_TOLERANCE_PX
    return evidence, "Yes" if verdict else "No", 0.9 if clear else 0.6


def _shapes(ctx: SkillContext, request: Request) -> tuple[str, str | None, float]:
    color = request.colors[0] if request.colors else None
    found = ctx.use("shapes", shape=request.shape, color=color)
    noun = f"{color + ' ' if color else ''}{request.shape}(s)"
    if not found:
        return f"no {noun} found", _number(0, request), 0.4
    colors = sorted({s.color for s in found})
    support = min(s.support for s in found)
    evidence = f"{len(found)} {noun} found (colours: {', '.join(colors)}; least drawn outline {support:.0%})"
    return evidence, _number(len(found), request), 0.85


def _as_choice(answer: str, choices: list[str], confidence: float) -> tuple[str, float]:
    """The option that says the same as `answer` (same number, pair or yes/no), else the only option whose claim
    about the count the counted number makes true ("There are no circles" for 0, "more than 5" for 7); unchanged,
    less sure, if none does."""
    count = parse_number(answer)
    claims = [claim_in(option) for option in choices]
    if count is not None and all(claims):
        true = [option for option, claim in zip(choices, claims) if claim.holds(int(count))]
        if len(true) == 1:
            return true[0], confidence
    key = _key(answer)
    for option in choices:
        if _key(option) == key:
            return option, confidence
    return answer, confidence * 0.5


def _key(text: str) -> tuple:
    numbers = numbers_in(text, grouped=False)  # "(3,4)" is a pair
    if len(numbers) >= 2:
        return tuple(float(n.value) for n in numbers[:2])
    value = parse_number(text)
    if value is not None:
        return (value,)
    return (text.strip().lower().rstrip("."),)
