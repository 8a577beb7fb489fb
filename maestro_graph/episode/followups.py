"""Follow-ups about an earlier answer, one rule for every door that keeps a conversation (an OpenAI `messages`
history, `maestro serve` and Agent Server threads, `maestro ask --thread`): "What is double that number?" after
"How many circles are there?" -> "7" is 14, worked out from the conversation, not from the image again.

A follow-up is resolved when its whole question is arithmetic on earlier answers (`resolve`):

- a multiple of the latest answer: "double/twice/triple/half (of) that number", "that number times 3", "add 2 to
  it", "that squared" (the reference: `that`, `this`, `it`, `the answer`, `that number/result/count/...`);
- a comparison of the latest answer: "is it more than 5?", "is that number even?", "is the answer at least 3?";
- the sum of the earlier answers that are numbers (two or more): "and the total?", "what is the sum?", "altogether?".

The resolved question is self-contained ("What is 7 * 2?"), and the graph computes it exactly with the registry's
calculator (`Registry.calculate`) as the episode's one step, without calling the policy or looking at an image: the
follow-up is about what was said. The arithmetic is exact, but its inputs are only as sure as the answers they came
from: the answer's confidence is capped at the least confidence of the earlier answers it was computed from, where
the conversation knows them (`Followup.confidence_cap`; a thread's episodes do, a client's history does not). A
follow-up that names an earlier answer ("that number", "the answer", "the total") that the conversation cannot supply
(no earlier answer, or one that is not a number) is refused with a question back ("which number do you mean?"), never
guessed from the image; a bare `it` with no earlier number is left to the experts (it may be something in the image).
Anything else is not a follow-up of this kind and goes on as asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from ..numbers import parse_number, whole_number
from ..types import ErrorKind, Step, Turn

__all__ = ["Followup", "Unresolved", "resolve", "computed"]

_REF = (r"(?:(?:that|this|the|your|the last|the previous|the earlier)\s+(?:number|answer|result|count|value|amount|"
        r"figure)|that|this|it)")
"""What refers to the latest answer."""
_NUM = r"(?P<k>-?\d+(?:\.\d+)?)"
_LEAD = re.compile(r"^(?:and|so|ok|okay|then|now|also|well|but)\b[\s,]*", re.I)
_ASK = r"(?:(?:what|how much)\s+(?:is|would be|'s)|what's|and|so|calculate|compute)?\s*"
_SCALE = re.compile(rf"^{_ASK}(?P<op>double|twice|triple|half(?:\s+of)?)\s+{_REF}$", re.I)
_BINARY = re.compile(rf"^{_ASK}{_REF}\s+(?P<op>plus|minus|times|multiplied by|divided by|over|\+|-|\*|×|x|/|÷)"
                     rf"\s+{_NUM}$", re.I)
_ADD_TO = re.compile(rf"^(?P<op>add|subtract|take)\s+{_NUM}\s+(?:to|from)\s+{_REF}$", re.I)
_SQUARED = re.compile(rf"^{_ASK}{_REF}\s+(?P<op>squared|cubed)$", re.I)
_COMPARE = re.compile(rf"^(?:is|was)\s+{_REF}\s+(?P<op>more than|greater than|larger than|bigger than|higher than|"
                      rf"above|over|less than|fewer than|smaller than|lower than|below|under|at least|at most|"
                      rf"equal to|the same as|exactly)\s+{_NUM}$", re.I)
_PARITY = re.compile(rf"^(?:is|was)\s+{_REF}\s+(?:an?\s+)?(?P<op>even|odd)(?:\s+number)?$", re.I)
_TOTAL = re.compile(r"^(?:(?:what|how much|how many)\s+(?:is|are|'s)\s+|what's\s+)?(?:the\s+|in\s+)?"
                    r"(?P<op>total|sum|altogether|combined|all together)(?:\s+of\s+(?:them|those|these|both|the two|"
                    r"all of them|those numbers|these numbers))?$", re.I)
_NAMED = re.compile(r"^(?:that|this|the|your|the last|the previous|the earlier)\s", re.I)

_SCALES = {"double": "* 2", "twice": "* 2", "triple": "* 3", "half": "/ 2"}
_OPERATORS = {"plus": "+", "minus": "-", "times": "*", "multiplied by": "*", "divided by": "/", "over": "/",
              "x": "*", "×": "*", "÷": "/", "+": "+", "-": "-", "*": "*", "/": "/"}
_ABOVE = {"more than", "greater than", "larger than", "bigger than", "higher than", "above", "over"}
_BELOW = {"less than", "fewer than", "smaller than", "lower than", "below", "under"}
_AT_LEAST, _AT_MOST, _EQUAL = {"at least"}, {"at most"}, {"equal to", "the same as", "exactly"}


@dataclass(frozen=True)
class Followup:
    """A follow-up resolved from the conversation: the self-contained question, the expression that answers it,
    and how the calculator's value becomes the answer (a comparison reads the sign of a difference)."""

    question: str
    expression: str
    answer: Callable[[Fraction], str]
    confidence_cap: float | None = None
    """The least confidence of the earlier answers the follow-up was computed from (None: none of them has one)."""


@dataclass(frozen=True)
class Unresolved:
    """A follow-up that names an earlier answer the conversation cannot supply: the question back to the user."""

    reason: str


def _number(answer: str | None) -> Fraction | None:
    """The number an earlier answer states: the whole answer ("7", "$1,200"), or a short one's number ("7 circles")."""
    if not answer:
        return None
    whole = whole_number(answer)
    if whole is not None:
        return Fraction(whole.value)
    stated = parse_number(answer) if len(answer.split()) <= 3 else None
    return Fraction(stated).limit_denominator(10**6) if stated is not None else None


def _written(value: Fraction) -> str:
    """A value as an answer: an integer plainly, else a decimal of at most 6 places."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def _sign(test: Callable[[Fraction], bool]) -> Callable[[Fraction], str]:
    return lambda difference: "yes" if test(difference) else "no"


def resolve(question: str, turns: Sequence[Turn]) -> Followup | Unresolved | None:
    """The follow-up `question` resolved against the conversation's `turns` (oldest first), a refusal when it names
    an earlier answer the conversation cannot supply, or None when it is not such a follow-up."""
    asked = _LEAD.sub("", question.strip().rstrip("?!. ").strip()).strip()
    asked = re.sub(r"\s+", " ", asked)
    answered = [t for t in turns if t.get("answer")]
    answers = [t["answer"] for t in answered]
    if _TOTAL.match(asked) is not None:
        summed = [(v, t) for t in answered if (v := _number(t["answer"])) is not None]
        values = [v for v, _ in summed]
        if len(values) < 2 and not (values or "of" in asked.lower().split()):
            return None  # "What is the total?" with no earlier numbers is a question about the image
        if len(values) < 2:
            return Unresolved(f"which numbers do you mean? {question.strip()!r} asks for a total of earlier answers, "
                              f"and the conversation has {len(values) or 'no'} earlier answer(s) that are numbers; "
                              "ask with the numbers, or ask about the image")
        expression = " + ".join(_written(v) for v in values)
        return Followup(f"What is {expression}?", expression, _written, _least([t for _, t in summed]))
    shaped = _shape(asked)
    if shaped is None:
        return None
    expression_of, question_of, answer, reference = shaped
    latest = _number(answers[-1]) if answers else None
    if latest is None:
        if not _NAMED.match(reference):
            return None  # a bare "it"/"that" with no earlier number may be about the image
        said = f"the latest answer, {answers[-1]!r}, is not a number" if answers else "there is no earlier answer"
        return Unresolved(f"which number do you mean? {question.strip()!r} refers to an earlier answer, and {said}; "
                          "ask with the number")
    value = _written(latest)
    return Followup(question_of(value), expression_of(value), answer, _least(answered[-1:]))


def _least(turns: Sequence[Turn]) -> float | None:
    """The least confidence among `turns`' answers that have one (None when none has)."""
    known = [c for t in turns if (c := t.get("confidence")) is not None]
    return min(known) if known else None


def _shape(asked: str) -> tuple[Callable[[str], str], Callable[[str], str], Callable[[Fraction], str], str] | None:
    """(expression, question, answer reader, the words that referred) of a follow-up on the latest answer."""
    if (m := _SCALE.match(asked)) is not None:
        op = _SCALES[m["op"].split()[0].lower()]
        return (lambda v: f"{v} {op}"), (lambda v: f"What is {v} {op}?"), _written, _ref(asked, m)
    if (m := _BINARY.match(asked)) is not None:
        op, k = _OPERATORS[m["op"].lower()], m["k"]
        return (lambda v: f"{v} {op} {k}"), (lambda v: f"What is {v} {op} {k}?"), _written, _ref(asked, m)
    if (m := _ADD_TO.match(asked)) is not None:
        op, k = ("+" if m["op"].lower() == "add" else "-"), m["k"]
        return (lambda v: f"{v} {op} {k}"), (lambda v: f"What is {v} {op} {k}?"), _written, _ref(asked, m)
    if (m := _SQUARED.match(asked)) is not None:
        power = 2 if m["op"].lower() == "squared" else 3
        return (lambda v: f"{v}**{power}"), (lambda v: f"What is {v}^{power}?"), _written, _ref(asked, m)
    if (m := _COMPARE.match(asked)) is not None:
        op, k = m["op"].lower(), m["k"]
        test = _comparison(op)
        return (lambda v: f"{v} - ({k})"), (lambda v: f"Is {v} {op} {k}?"), _sign(test), _ref(asked, m)
    if (m := _PARITY.match(asked)) is not None:
        odd = m["op"].lower() == "odd"
        return ((lambda v: f"{v} % 2"), (lambda v: f"Is {v} {m['op'].lower()}?"),
                _sign(lambda r: (r == 1) if odd else (r == 0)), _ref(asked, m))
    return None


def _comparison(op: str) -> Callable[[Fraction], bool]:
    """What the difference (answer - k) must be for the comparison to hold."""
    if op in _ABOVE:
        return lambda d: d > 0
    if op in _BELOW:
        return lambda d: d < 0
    if op in _AT_LEAST:
        return lambda d: d >= 0
    if op in _AT_MOST:
        return lambda d: d <= 0
    return lambda d: d == 0


def _ref(asked: str, match: re.Match) -> str:
    """The words of `asked` that refer to the earlier answer (what follows the verb or the scale word)."""
    found = re.search(_REF, asked[match.start():], re.I)
    return found.group(0) if found else ""


def computed(followup: Followup, step: Step) -> Step:
    """The calculator's step with the follow-up's answer: the value as an answer (a comparison's yes or no), the
    resolved question in the evidence. A step that failed stays failed (the episode then has no answer)."""
    if step.error or step.answer is None:
        return step
    value = _value(step.answer)
    if value is None:
        return step.model_copy(update={"answer": None, "error": f"the calculator's value {step.answer!r} is not a "
                                       "number", "error_kind": ErrorKind.EXPERT})
    said = followup.answer(value)
    return step.model_copy(update={"answer": said, "evidence": f"{followup.question} {step.evidence} -> {said}"})


def _value(text: str) -> Fraction | None:
    """The calculator's value ("14", "7/2", "3.5") as a fraction."""
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        stated = parse_number(text)
        return Fraction(stated).limit_denominator(10**6) if stated is not None else None
