"""What a counting question asks for, read from its words, and how it wants the answer written.

Parsing is general: a question names its measurement by nouns and verbs ("rows", "lines ... cross", "circles ...
touching", "how many pentagons") and its answer format by its own instructions ("curly brackets", "(row, column)",
a yes/no opening such as "Are ...").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from maestro_graph.experts.opencv_vision import COLOR_NAMES, shape_kind

Measure = Literal["grid", "crossings", "contact", "shapes"]

_CONTACT = re.compile(r"\b(touch|overlap|intersect|cross|meet)\w*")
_LINES = re.compile(r"\b(lines?|curves?|polylines?|paths?)\b")
_YES_NO = re.compile(r"^\W*(are|is|do|does|did|can|will|has|have)\b")
_HOW_MANY = re.compile(r"\bhow many\b|\bcount\b|\bnumber of\b")
_GRID_WORDS = {"row": "rows", "column": "columns", "col": "columns", "cell": "cells"}


@dataclass(frozen=True)
class Request:
    """One parsed question: the measurement, its arguments and the answer format."""

    measure: Measure
    shape: str | None = None  # "shapes": the kind (canonical singular name)
    colors: tuple[str, ...] = ()  # colours named for the measurement, in order of appearance
    overlap: bool = False  # "contact": do areas overlap (rather than: do rims touch)
    grid_parts: tuple[str, ...] = ()  # "grid": "rows" / "columns" / "cells" in the order asked
    braces: bool = False  # write a number as {n}


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


def parse(question: str) -> Request | None:
    """The measurement a question asks for, or None when it asks for none this skill knows."""
    q = question.lower()
    braces = "curly" in q or bool(re.search(r"\{\s*\d+\s*\}", q))
    grid_parts = tuple(dict.fromkeys(_GRID_WORDS[m] for m in re.findall(r"\b(row|column|col|cell)s?\b", q)))
    if grid_parts:
        return Request("grid", grid_parts=grid_parts, braces=braces)
    contact = _CONTACT.search(q)
    if contact and _LINES.search(q):
        return Request("crossings", colors=colors_in(q), braces=braces)
    shape, color = _shape_with_color(q)
    if contact and shape == "circle" and _YES_NO.search(q):
        return Request("contact", overlap=contact.group(1) in ("overlap", "intersect", "cross"), braces=braces)
    if shape and _HOW_MANY.search(q):
        return Request("shapes", shape=shape, colors=color, braces=braces)
    return None
