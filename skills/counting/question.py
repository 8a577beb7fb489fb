"""What a counting question asks for, read from its words, and how it wants the answer written.

Parsing is general: a question names its measurement by nouns and verbs ("rows", "lines ... cross", "circles ...
touching", "how many pentagons") and its answer format by its own instructions ("curly brackets", "(row, column)",
a yes/no opening such as "Are ...").

A counting question is one however it is phrased: "How many circles?", a yes/no claim about the count ("Are there
more than 5 circles?", "Is the number of squares greater than 3?", "Are there exactly 7 pentagons?"), or options
that are claims about it ("There are 7 circles", "no circles", "more than 5"). A claim is read as a comparison
with a number (`Claim`), so the measured count answers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from maestro_graph.answer_forms import opens_polar
from maestro_graph.choices import question_stem
from maestro_graph.experts.protocols import COLOR_NAMES, shape_kind

Measure = Literal["grid", "crossings", "contact", "shapes"]
Comparison = Literal["eq", "gt", "lt", "ge", "le"]

_CONTACT = re.compile(r"\b(touch|overlap|intersect|cross|meet)\w*")
_LINES = re.compile(r"\b(lines?|curves?|polylines?|paths?)\b")
_HOW_MANY = re.compile(r"\bhow many\b|\bcount\b|\bnumber of\b")
_GRID_WORDS = {"row": "rows", "column": "columns", "col": "columns", "cell": "cells"}
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_COUNT = r"(\d+|" + "|".join(_NUMBER_WORDS) + r")\b"
_COMPARISONS: tuple[tuple[re.Pattern, Comparison], ...] = (  # "no more than" before "more than"
    (re.compile(r"\b(?:no|not) (?:more|greater) than " + _COUNT), "le"),
    (re.compile(r"\b(?:no|not) (?:fewer|less) than " + _COUNT), "ge"),
    (re.compile(r"\b(?:more|greater|larger|bigger|higher) than " + _COUNT), "gt"),
    (re.compile(r"\b(?:fewer|less|smaller|lower) than " + _COUNT), "lt"),
    (re.compile(r"\bat least " + _COUNT), "ge"),
    (re.compile(r"\bat most " + _COUNT), "le"),
    (re.compile(r"\b(?:exactly|equal to|equals|only) " + _COUNT), "eq"),
)
_NONE = re.compile(r"\b(no|none|zero)\b")
_BARE_COUNT = re.compile(r"(?<![\w.])" + _COUNT + r"(?![.,]\d)")


@dataclass(frozen=True)
class Claim:
    """A statement about a count: `op` compared with `value` ("more than 5" is gt 5, "There are 7 circles" eq 7)."""

    op: Comparison
    value: int

    def holds(self, count: int) -> bool:
        return {"eq": count == self.value, "gt": count > self.value, "lt": count < self.value,
                "ge": count >= self.value, "le": count <= self.value}[self.op]


def claim_in(option: str) -> Claim | None:
    """The claim about a count an option makes: a comparison with a number, "no"/"none" (0), or a single number
    (equal to it); None for anything else (two numbers, no number)."""
    t = option.lower()
    compared = _compared(t)
    if compared:
        return compared
    numbers = _BARE_COUNT.findall(t)
    if len(numbers) == 1:
        return Claim("eq", _count(numbers[0]))
    if not numbers and _NONE.search(t):
        return Claim("eq", 0)
    return None


def _question_claim(stem: str) -> Claim | None:
    """The claim a yes/no question makes about a count: a comparison with a number, or a number of the things
    counted ("Are there 7 circles?"); a number that counts nothing ("the circle in image 2") is no claim."""
    compared = _compared(stem)
    if compared:
        return compared
    words = re.findall(r"[a-z]+|\d+", stem)
    counted = [w for i, w in enumerate(words[:-1]) if (w.isdigit() or w in _NUMBER_WORDS)
               and any(_counted_noun(n) for n in words[i + 1:i + 3])]
    return Claim("eq", _count(counted[0])) if len(counted) == 1 else None


def _counted_noun(word: str) -> bool:
    return shape_kind(word) is not None or word.rstrip("s") in _GRID_WORDS


def _compared(text: str) -> Claim | None:
    for pattern, op in _COMPARISONS:
        match = pattern.search(text)
        if match:
            return Claim(op, _count(match.group(1)))
    return None


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


@dataclass(frozen=True)
class Request:
    """One parsed question: the measurement, its arguments and the answer format."""

    measure: Measure
    shape: str | None = None  # "shapes": the kind (canonical singular name)
    colors: tuple[str, ...] = ()  # colours named for the measurement, in order of appearance
    overlap: bool = False  # "contact": do areas overlap (rather than: do rims touch)
    grid_parts: tuple[str, ...] = ()  # "grid": "rows" / "columns" / "cells" in the order asked
    braces: bool = False  # write a number as {n}
    claim: Claim | None = None  # a yes/no question about the count: answer whether it holds


def colors_in(text: str) -> tuple[str, ...]:
    """Colour names in order of appearance ('grey' reads as gray, 'violet' as purple)."""
    words = re.findall(r"[a-z]+", text.lower().replace("grey", "gray").replace("violet", "purple"))
    return tuple(dict.fromkeys(w for w in words if w in COLOR_NAMES))


def _shape_with_color(q: str) -> tuple[str | None, tuple[str, ...]]:
    """The first shape noun and the colour word right before it ('how many red circles' -> circle, red)."""
    words = re.findall(r"[a-z]+", q)
    for i, word in enumerate(words):
        kind = shape_kind(word)
        if kind:
            return kind, colors_in(words[i - 1]) if i else ()
    return None, ()


def _claims(choices: list[str] | None) -> list[Claim] | None:
    """Each option's claim about the count, or None unless every option (two or more) is a statement about the
    things counted ("There are 7 circles", "no squares"): bare numbers such as "30°" count only when the question
    itself asks how many."""
    options = choices or []
    claims = [claim_in(c) for c in options]
    named = all(any(_counted_noun(w) for w in re.findall(r"[a-z]+", c.lower())) for c in options)
    return claims if len(claims) >= 2 and named and all(claims) else None  # type: ignore[return-value]


def parse(question: str, choices: list[str] | None = None) -> Request | None:
    """The measurement a question asks for, or None when it asks for none this skill knows. A yes/no question
    that makes a claim about a count carries it (`Request.claim`); options that all make one ask for the count."""
    q = question.lower()
    stem = question_stem(question).lower()
    claim = _question_claim(stem) if opens_polar(stem) else None
    counted = bool(_HOW_MANY.search(q)) or claim is not None or _claims(choices) is not None
    braces = "curly" in q or bool(re.search(r"\{\s*\d+\s*\}", q))
    grid_parts = tuple(dict.fromkeys(_GRID_WORDS[m] for m in re.findall(r"\b(row|column|col|cell)s?\b", q)))
    if grid_parts:
        return Request("grid", grid_parts=grid_parts, braces=braces, claim=claim if len(grid_parts) == 1 else None)
    contact = _CONTACT.search(q)
    if contact and _LINES.search(q):
        return Request("crossings", colors=colors_in(q), braces=braces, claim=claim)
    shape, color = _shape_with_color(q)
    if contact and shape == "circle" and opens_polar(q):
        return Request("contact", overlap=contact.group(1) in ("overlap", "intersect", "cross"), braces=braces)
    if shape and counted:
        return Request("shapes", shape=shape, colors=color, braces=braces, claim=claim)
    return None
