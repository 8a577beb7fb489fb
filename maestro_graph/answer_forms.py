"""What form of answer a question asks for (an option, yes/no, a number), and whether a candidate answer has it: part
of the skill API, so a skill reads a question's form as the graph and the policies do.

Experts answer in their own habits: a table reader returns a number even when the question asks "yes or no". A
policy choosing among candidates needs to see that mismatch; the question's wording and options are all it uses
(never the task's answer type, which belongs to the answer key).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Literal

from .choices import names_option
from .numbers import parse_number
from .scoring import is_yes_no, normalize_text

__all__ = ["CONTRADICTS_FORM", "FORM_DIM", "HAS_FORM", "Form", "candidate_form", "asks_yes_no", "expected_form",
           "has_form", "opens_polar", "answered_yes_or_no"]

Form = Literal["choice", "yesno", "number", "text"]

FORM_DIM = 6
HAS_FORM, CONTRADICTS_FORM = 3, 4
"""Columns of `candidate_form`'s list: the candidate has the form the question asks for / contradicts it."""

_YES_NO_RE = re.compile(r"\b(yes or no|yes/no|true or false|true/false)\b", re.IGNORECASE)
_POLAR_RE = re.compile(r"^\W*(is|are|was|were|do|does|did|can|could|will|would|has|have|had|should)\b", re.IGNORECASE)
_HOW_MANY_RE = re.compile(r"\bhow (many|much)\b", re.IGNORECASE)


def expected_form(question: str, choices: Sequence[str] | None) -> Form:
    """Options win; then an explicit "yes or no" / "true or false" or a question that opens with an auxiliary verb;
    then "how many" / "how much"; anything else is free text."""
    if choices:
        return "choice"
    if _YES_NO_RE.search(question) or opens_polar(question):
        return "yesno"
    if _HOW_MANY_RE.search(question):
        return "number"
    return "text"


def opens_polar(question: str) -> bool:
    """Whether the question opens with an auxiliary verb ("Is ...", "Are there ...", "Does ..."), as a yes/no
    question does (and "Is it odd or even?" too: options or an explicit "yes or no" settle which)."""
    return bool(_POLAR_RE.search(question))


def asks_yes_no(question: str, choices: Sequence[str] | None = None) -> bool:
    """Whether the question itself says to answer yes or no ("Please answer Yes or No", "true or false"), not only
    opens like a yes/no question (which "Is it odd or even?" does too), or its options are exactly Yes and No."""
    if choices:
        return sorted(normalize_text(c) for c in choices) == ["no", "yes"]
    return bool(_YES_NO_RE.search(question))


def answered_yes_or_no(question: str, choices: Sequence[str] | None) -> bool:
    """Whether yes or no answers the question: it says so or its options are Yes and No (`asks_yes_no`), or, without
    options, it opens like a yes/no question (`expected_form`): what a skill that finds a value cannot answer."""
    return asks_yes_no(question, choices) or expected_form(question, choices) == "yesno"


def _is_short_number(text: str) -> bool:
    return 0 < len(normalize_text(text).split()) <= 3 and parse_number(text) is not None


_HAS_FORM: dict[Form, Callable[[str, Sequence[str] | None], bool]] = {
    "yesno": lambda text, choices: is_yes_no(text),
    "number": lambda text, choices: _is_short_number(text),
    "choice": lambda text, choices: names_option(text, choices or []),
    "text": lambda text, choices: True,
}
"""What each form asks of an answer; `candidate_form` reads all of them, `has_form` the question's."""


def has_form(text: str | None, expected: Form, choices: Sequence[str] | None) -> bool:
    """Whether a candidate answer is in the form the question asks for: an option, yes/no, a short number, or (for a
    free-text question) any non-empty text."""
    return bool(text and text.strip() and _HAS_FORM[expected](text, choices))


def candidate_form(text: str, expected: Form, choices: Sequence[str] | None) -> list[float]:
    """[is yes/no, is a short number, names an option, has the expected form, contradicts it, log word count]."""
    flags = {form: check(text, choices) for form, check in _HAS_FORM.items()}
    has = flags[expected]
    return [float(flags["yesno"]), float(flags["number"]), float(flags["choice"]), float(has and expected != "text"),
            float(not has), math.log1p(len(normalize_text(text).split())) / 3]
