"""Finding what a question names in a table: row labels, column headers, quantities before an item, conditions.

OCR may misspell a label by a letter or two and questions use singular where tables use plural, so names are compared
as normalised tokens with a similarity threshold rather than by exact substring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from fractions import Fraction

from maestro_graph.numbers import first_number

__all__ = ["Mention", "tokens", "find_mentions", "similarity", "contains_words", "quantity_before", "number_condition"]

_SIMILAR = 0.84  # minimum SequenceMatcher ratio for two names to be the same
_EXACT_BELOW = 5  # names this short must match exactly ("may" is not "many")
_STOP = {"a", "an", "the", "of", "to", "at", "on", "in", "for"}


def _singular(word: str) -> str:
    if len(word) > 3 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """Lower-case singular word tokens, punctuation dropped (`Nature's` -> `nature`, `s`)."""
    return [_singular(w) for w in re.findall(r"[a-z0-9]+", text.lower().replace("’", "'"))]


def similarity(a: str, b: str) -> float:
    ta, tb = " ".join(tokens(a)), " ".join(tokens(b))
    if not ta or not tb:
        return 0.0
    return SequenceMatcher(None, ta, tb).ratio()


def contains_words(long: str, short: str) -> bool:
    """Every word of `short` occurs in `long` (an option naming part of a row label: "Cleveland" in "Cleveland Zoo")."""
    words = set(tokens(long))
    return bool(tokens(short)) and all(t in words for t in tokens(short))


@dataclass(frozen=True)
class Mention:
    """Label `index` named in the question at character span [start, end)."""

    index: int
    start: int
    end: int
    score: float


def find_mentions(question: str, labels: list[str]) -> list[Mention]:
    """Labels named in the question, longest and best first, without overlaps; returned in question order."""
    words = [(m.group(0), m.start(), m.end()) for m in re.finditer(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?", question)]
    qtok = [" ".join(tokens(w[0])) for w in words]
    found: list[tuple[float, int, Mention]] = []
    for i, label in enumerate(labels):
        ltok = tokens(label)
        content = [t for t in ltok if t not in _STOP]
        if not content:
            continue
        target = " ".join(ltok)
        n = len(" ".join(ltok).split())
        for size in {max(1, n - 1), n, n + 1}:
            for s in range(0, len(words) - size + 1):
                window = " ".join(qtok[s : s + size])
                ratio = SequenceMatcher(None, window, target).ratio()
                if window == target or (ratio >= _SIMILAR and len(target) > _EXACT_BELOW):
                    found.append((ratio, len(target), Mention(i, words[s][1], words[s + size - 1][2], ratio)))
    found.sort(key=lambda f: (-f[0], -f[1]))
    chosen: list[Mention] = []
    for _, _, m in found:
        if all(m.end <= c.start or m.start >= c.end for c in chosen) and all(m.index != c.index for c in chosen):
            chosen.append(m)
    return sorted(chosen, key=lambda m: m.start)


_QTY_RE = re.compile(
    r"(?<![$\d])(\d+\+\d+/\d+|\d+/\d+|\d+(?:\.\d+)?)\s*(?:of an?\s+)?(?:[a-z]+\s+){0,2}(?:of\s+)?(?:an?\s+)?$",
    re.IGNORECASE,
)


def quantity_before(question: str, start: int, limit: int) -> Fraction:
    """The quantity written just before an item ("3+1/2 pounds of", "5 boxes of"), else 1."""
    m = _QTY_RE.search(question[limit:start])
    if not m:
        return Fraction(1)
    return first_number(m.group(1)).value


_CONDITIONS = [
    (r"at least (\S+)(?: [a-z]+)? but (?:fewer|less) than (\S+)", lambda a, b: lambda v: a <= v < b),
    (r"at least (\S+)", lambda a: lambda v: v >= a),
    (r"(\S+) or more", lambda a: lambda v: v >= a),
    (r"at most (\S+)", lambda a: lambda v: v <= a),
    (r"(?:fewer|less) than (\S+)", lambda a: lambda v: v < a),
    (r"(?:more|greater) than (\S+)", lambda a: lambda v: v > a),
    (r"exactly (\S+)", lambda a: lambda v: v == a),
]


def number_condition(question: str):
    """(description, predicate) for "at least 35 but fewer than 78", "exactly 64", ...; None when absent."""
    text = question.replace("°", " ")
    for pattern, make in _CONDITIONS:
        m = re.search(pattern, text, re.IGNORECASE)
        if m:
            nums = [first_number(g) for g in m.groups()]
            if all(n is not None for n in nums):
                return m.group(0), make(*[n.value for n in nums])
    return None
