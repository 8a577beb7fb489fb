"""What a geometry question gives and asks: its numbers, its options, and which kind of question it is."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from maestro_graph.numbers import numbers_in as written_numbers

__all__ = ["Question", "parse_question", "numbers_in", "inline_options", "listed_options", "without_listed_options"]

# "(a) 90 degrees (b) 135 degrees": options written inside the question (their letters are the choices)
_INLINE = re.compile(r"\(([a-e])\)\s*([^()]*?)(?=\s*\([a-e]\)|\n|$)")
# "A. 090°T" / "B: 12" / "(C) 7": options listed one per line in a question or an image
_LISTED = re.compile(r"^\s*\(?([A-F])\s*[.:：)]\s*(.+?)\s*$", re.M)
_POINTS = r"([A-Z]{2,4})"
_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("angle", re.compile(r"estimate of the angle " + r"([A-Z]{3})\b")),
    ("length", re.compile(r"\bLine ([A-Z]{2}) is X times longer than ([A-Z]{2})\b", re.I)),
    ("area", re.compile(r"\b([A-Z]{3,4}) is X times larger in area than ([A-Z]{3,4})\b")),
    ("polygon", re.compile(r"\bthere is (no )?(?:a )?(triangle|quadrilateral) " + _POINTS + r"\b", re.I)),
    ("diameter", re.compile(r"\bline ([A-Z]{2}) is (not )?a (diameter|radius)\b", re.I)),
]


@dataclass
class Question:
    """`kind`: angle | length | area | polygon | diameter (figure questions naming points) or compute."""

    text: str
    kind: str
    groups: tuple[str | None, ...]
    options: list[tuple[str, str]]  # (what to answer with, option text)


def numbers_in(text: str) -> list[float]:
    """Distinct numbers in order of appearance (point names such as A1 are not numbers)."""
    text = unicodedata.normalize("NFKC", text)
    values: list[float] = []
    for number in written_numbers(text, signed=False, grouped=False):  # "(3,4)" is two numbers, "-" a dash
        value = float(number.value)
        if number.start and re.match(r"[A-Za-z_]", text[number.start - 1]):
            continue  # a point's name ("A1"), not a number
        if value not in values:
            values.append(value)
    return values


def inline_options(text: str) -> list[tuple[str, str]]:
    found = [(m.group(1), m.group(2).strip()) for m in _INLINE.finditer(text)]
    return found if len(found) >= 2 and [k for k, _ in found] == [chr(97 + i) for i in range(len(found))] else []


def listed_options(text: str) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for m in _LISTED.finditer(text):
        found.setdefault(m.group(1), m.group(2))
    letters = sorted(found)
    return [(k, found[k]) for k in letters] if len(letters) >= 2 and letters[0] == "A" else []


def without_listed_options(text: str) -> str:
    """The text without its lines of listed options (what `listed_options` reads): the options are not givens."""
    return _LISTED.sub("", text) if listed_options(text) else text


def _choice_options(choices: list[str]) -> list[tuple[str, str]]:
    """Choices such as 'A:$x$' or 'B. 180°T' answer by letter; plain choices answer with their own text."""
    parsed = [re.match(r"^\(?([A-F])\)?\s*[.:：]\s*(.*)$", c.strip(), re.S) for c in choices]
    if all(parsed):
        return [(m.group(1), m.group(2)) for m in parsed]
    return [(c, c) for c in choices]


def parse_question(question: str, choices: list[str] | None, figure_text: str = "") -> Question:
    """Classify the question and collect its options: the task's choices, options written in the question
    (letters as choices), or, for a question given only as an image, options listed in the figure text."""
    text = question.strip() or figure_text
    if choices and all(len(c.strip()) == 1 for c in choices):
        options = inline_options(text) or [(c, c) for c in choices]
    elif choices:
        options = _choice_options(choices)
    else:
        options = listed_options(text)
    for kind, pattern in _PATTERNS:
        match = pattern.search(text)
        if match:
            return Question(text, kind, match.groups(), options)
    return Question(text, "compute", (), options)
