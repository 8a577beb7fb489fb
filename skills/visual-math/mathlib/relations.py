"""Relation search: which option can be reached from the given numbers by the usual geometric relations.

A geometry answer is almost always a short formula of the given quantities: a complement (90 - x) or supplement
(180 - x), the third angle of a triangle (180 - a - b), an inscribed angle (half the central one), a midline (half a
side), Pythagoras, a perimeter, a similarity ratio (a*b/c). We enumerate such formulas over the given numbers, give
each a cost (short formulas, and relations the question's words point at, are cheaper), and answer with the option
whose value the cheapest formula reaches. A value equal to a given number costs most: options repeating a given
are the usual distractors. This is a prior, not a proof, so confidence stays moderate.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Derivation", "derive", "best_option"]

# the concept a question mentions -> the relations it makes likely
_CUES: list[tuple[str, frozenset[str]]] = [
    (r"⊥|perpendicular|垂|right|Rt|直角|diameter|直径|tangent|切",
     frozenset({"90-x", "hyp", "leg", "90-x/2", "90+x/2"})),
    (r"∥|parallel|平行|straight|line|直线|延长|extended|supplement", frozenset({"180-x", "180-a-b"})),
    (r"midpoint|中点|bisect|平分|⊙|circle|圆|inscribed|central|arc|弧|median|中线|中位",
     frozenset({"x/2", "2x", "90-x/2", "90+x/2", "(a+b)/2", "2(a+b)"})),
    (r"triangle|△|三角形", frozenset({"180-a-b", "180-2x", "(180-x)/2"})),
    (r"perimeter|周长|sum|\+|total", frozenset({"a+b", "2(a+b)", "a+b+c", "a+b-c", "a-b"})),
    (r"similar|∼|~|ratio|∥|parallel|平行|:|比", frozenset({"a*b/c", "a/b", "a*b"})),
    (r"area|面积|S△|S~", frozenset({"a*b", "a*b/2", "a/b", "x/2", "2x", "x/4"})),
    (r"sin|cos|tan|elevation|仰角", frozenset({"x*sqrt(3)", "x/sqrt(3)", "a/b"})),
]
_UNARY: dict[str, Callable[[float], float]] = {
    "90-x": lambda x: 90 - x, "180-x": lambda x: 180 - x, "x/2": lambda x: x / 2, "2x": lambda x: 2 * x,
    "360-x": lambda x: 360 - x, "90-x/2": lambda x: 90 - x / 2, "90+x/2": lambda x: 90 + x / 2,
    "180-2x": lambda x: 180 - 2 * x, "(180-x)/2": lambda x: (180 - x) / 2, "x*sqrt(3)": lambda x: x * math.sqrt(3),
    "x/sqrt(3)": lambda x: x / math.sqrt(3), "x/4": lambda x: x / 4,
}
_BINARY: dict[str, Callable[[float, float], float]] = {
    "a+b": lambda a, b: a + b, "a-b": lambda a, b: a - b, "a*b": lambda a, b: a * b, "a/b": lambda a, b: a / b,
    "180-a-b": lambda a, b: 180 - a - b, "(a+b)/2": lambda a, b: (a + b) / 2, "2(a+b)": lambda a, b: 2 * (a + b),
    "a*b/2": lambda a, b: a * b / 2, "hyp": lambda a, b: math.hypot(a, b),
    "leg": lambda a, b: math.sqrt(a * a - b * b) if a > b else -1.0,
}
_TERNARY: dict[str, Callable[[float, float, float], float]] = {
    "a*b/c": lambda a, b, c: a * b / c, "a+b+c": lambda a, b, c: a + b + c, "a+b-c": lambda a, b, c: a + b - c,
    "180-a-b-c": lambda a, b, c: 180 - a - b - c,
}
_GIVEN_COST = 5.0
_MAX_GIVENS = 6  # triples of more numbers explode and mostly add coincidences


@dataclass(frozen=True)
class Derivation:
    value: float
    cost: float
    formula: str  # e.g. "90 - 55", readable and checkable with the calculator


def _fill(template: str, names: dict[str, float | str]) -> str:
    """The relation's name written as a calculator expression with the numbers (or a sub-formula) put in."""
    text = {"hyp": "sqrt(a^2 + b^2)", "leg": "sqrt(a^2 - b^2)"}.get(template)
    text = text or template.replace("2x", "2*x").replace("2(", "2*(")
    put = lambda v: f"{v:g}" if isinstance(v, float) else f"({v})"  # noqa: E731
    return re.sub(r"[abcx]", lambda m: put(names[m.group()]), text)


def derive(givens: list[float], question: str) -> list[Derivation]:
    """Every positive value reachable by one relation (or two chained) from the givens, with its cost."""
    favoured = frozenset().union(*(ops for cue, ops in _CUES if re.search(cue, question)))
    weight = lambda op: 1.0 if op in favoured else 2.0  # noqa: E731 - a one-line cost rule
    out: list[Derivation] = []

    def add(value: float, cost: float, formula: str) -> None:
        if value > 0 and math.isfinite(value):
            out.append(Derivation(value, cost, formula))

    givens = [g for g in givens if g > 0][:_MAX_GIVENS]  # zero is never a given length or angle (and divides)

    for x in givens:
        add(x, _GIVEN_COST, f"{x:g}")
        for op, f in _UNARY.items():
            add(f(x), weight(op), _fill(op, {"x": x}))
    for a, b in itertools.permutations(givens, 2):
        for op, f in _BINARY.items():
            value = f(a, b)
            inner = _fill(op, {"a": a, "b": b})
            add(value, 1 + weight(op), inner)
            if value > 0:
                for op2, g in _UNARY.items():
                    add(g(value), 2 + weight(op) + weight(op2), _fill(op2, {"x": inner}))
    for a, b, c in itertools.permutations(givens, 3):
        for op, f in _TERNARY.items():
            add(f(a, b, c), 2 + weight(op), _fill(op, {"a": a, "b": b, "c": c}))
    return out


def best_option(values: list[float | None], derivations: list[Derivation]) -> tuple[int, Derivation, int] | None:
    """(option index, its cheapest derivation, how many derivations reach it) for the option reached most cheaply;
    ties go to the option reached in more ways. None when no option is reachable."""
    scored = []
    for index, value in enumerate(values):
        if value is None:
            continue
        hits = [d for d in derivations if math.isclose(d.value, value, rel_tol=1e-4, abs_tol=1e-6)]
        if hits:
            cheapest = min(hits, key=lambda d: d.cost)
            scored.append((cheapest.cost, -len(hits), index, cheapest))
    if not scored:
        return None
    cost, neg_count, index, derivation = min(scored, key=lambda s: s[:3])
    return index, derivation, -neg_count
