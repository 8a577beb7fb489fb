"""Scoring a predicted answer against a task's answer, shared by everything that scores (eval, rewards, oracle).

numbers: relative tolerance after parsing (`numbers.parse_number`: commas, units, %, $ stripped); yesno: also
true/false; choice: by letter or by option text; pair `(a,b)`: by numbers; text: normalised exact match.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence

from .numbers import numbers_in, parse_number

__all__ = ["score", "normalize_text", "choice_label", "label_index", "letters_only", "option_labels",
           "is_yes_no", "yes_no", "yes_no_in", "DEFAULT_TOLERANCE"]

DEFAULT_TOLERANCE = 0.0
_YES_NO_WORDS = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}
"""The words a yes/no answer is written with, and the reading of each."""
_YES = {"yes", "true", "y", "correct"}
_NO = {"no", "false", "n", "incorrect"}
"""What scoring also takes for yes and no in a prediction's first word ("y", "correct", ...)."""
_YES_NO_IN_RE = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)


def normalize_text(text: str) -> str:
    """Lower case, NFKC, strip LaTeX `$`, braces, punctuation at the ends and inner extra spaces."""
    text = unicodedata.normalize("NFKC", str(text)).strip().lower()
    text = text.replace("$", "").replace("\\", "")
    text = re.sub(r"\s+", " ", text)
    return text.strip(" .,:;!?\"'`{}[]()")


def _numbers_close(pred: float, gold: float, tolerance: float) -> bool:
    if math.isclose(pred, gold, rel_tol=1e-9, abs_tol=1e-9):
        return True
    return abs(pred - gold) <= tolerance * max(abs(gold), 1e-12)


def letters_only(choices: Sequence[str]) -> bool:
    """Options that are bare letters ("A", "b", ...): their texts are written in the question itself."""
    return all(len(c.strip()) == 1 and c.strip().isalpha() for c in choices)


def option_labels(choices: Sequence[str]) -> list[str]:
    """The label each option goes by in a prompt and a reply: a bare-letter option is its own letter, else
    `choice_label` of its position."""
    return [c.strip().upper() for c in choices] if letters_only(choices) else [choice_label(i)
                                                                              for i in range(len(choices))]


def choice_label(index: int) -> str:
    """The label of option `index` (from 0): A..Z, then AA, AB... (as spreadsheet columns), so that every option of a
    long list has a label made of letters only, which a prompt can show and a reply or a regex can name."""
    if index < 0:
        raise ValueError(f"an option index is 0 or more; got {index}")
    label = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        label = chr(ord("A") + rest) + label
    return label


def label_index(label: str) -> int | None:
    """The option index a label names (`choice_label`'s inverse, either case), or None when it is not a label."""
    if not label or not label.isascii() or not label.isalpha():
        return None
    index = 0
    for ch in label.upper():
        index = index * 26 + ord(ch) - ord("A") + 1
    return index - 1


def yes_no(text: str) -> str | None:
    """"yes" or "no" as a prediction's first word says it (also true/false, y/n, correct/incorrect), else None:
    how scoring reads a yes/no answer."""
    words = normalize_text(text).split()
    first = words[0] if words else ""
    return "yes" if first in _YES else "no" if first in _NO else None


def is_yes_no(text: str | None) -> bool:
    """Whether an answer is a yes/no (or true/false) answer: one or two words, the first of them yes, no, true or
    false."""
    words = normalize_text(text or "").split()
    return bool(words) and len(words) <= 2 and words[0] in _YES_NO_WORDS


def yes_no_in(text: str) -> str | None:
    """"yes" or "no" by the first yes, no, true or false written anywhere in a text (a model's reply: "The answer
    is: True."), else None."""
    found = _YES_NO_IN_RE.search(text)
    return None if found is None else _YES_NO_WORDS[found.group(1).lower()]


def _pair(text: str) -> tuple[float, ...] | None:
    nums = numbers_in(str(text), grouped=False)  # "(100,200)" is two numbers
    return tuple(float(n.value) for n in nums[:2]) if len(nums) >= 2 else None


def _choice(pred: str, gold: str, choices: list[str] | None) -> bool:
    """Right when the prediction names the gold option by letter or by its text."""
    pred_n, gold_n = normalize_text(pred), normalize_text(gold)
    if pred_n == gold_n:
        return True
    if not choices:
        return False
    options = [normalize_text(c) for c in choices]
    gold_index = next((i for i, c in enumerate(options) if c == gold_n), None)
    if gold_index is None:  # a gold answer given as the label ("b", or "ab" among more than 26 options)
        gold_index = label_index(gold_n)
    if gold_index is None or gold_index >= len(options):
        return False
    label = re.escape(choice_label(gold_index).lower())
    option = options[gold_index]
    # "B", "(B)", "B:" or "B. text" name the label; otherwise the option text itself
    if re.fullmatch(rf"\(?{label}\)?[:.)]?(\s.*)?", pred_n) and not (len(pred_n) > 2 and pred_n in options):
        return True
    stripped = re.sub(r"^[a-z][:.)]\s*", "", option)
    return pred_n in (option, stripped)


def score(prediction: str | None, answer: str, answer_type: str, *, tolerance: float | None = None,
          choices: list[str] | None = None) -> float:
    """1.0 when the prediction is right, else 0.0 (a float so that partial credit can be added later)."""
    if prediction is None or not str(prediction).strip():
        return 0.0
    pred = str(prediction)
    if answer_type == "number":
        p, g = parse_number(pred), parse_number(answer)
        if p is None or g is None:
            return float(normalize_text(pred) == normalize_text(answer))
        return float(_numbers_close(p, g, tolerance or DEFAULT_TOLERANCE))
    if answer_type == "yesno":
        return float(yes_no(pred) is not None and yes_no(pred) == yes_no(answer))
    if answer_type == "pair":
        said, expected = _pair(pred), _pair(answer)
        return float(said is not None and said == expected)
    if answer_type == "choice":
        return float(_choice(pred, answer, choices))
    if answer_type == "text":
        if choices:
            return float(_choice(pred, answer, choices))
        return float(normalize_text(pred) == normalize_text(answer))
    raise ValueError(f"unknown answer_type {answer_type!r}; expected number, text, yesno, choice or pair")
