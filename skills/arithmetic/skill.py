"""Tier-1 arithmetic word problems: quantities and one operation read from the wording, computed by the calculator.

The problem is parsed into quantities (number, money or percent, the words around it, whether it sits in the final
question sentence) and the operation is chosen by cue words in a fixed order, most specific first: percentages,
change from a payment, averages, equal sharing, rates (each / per / an hour), then subtraction or addition. The
chosen arithmetic becomes one expression for the `calculator` tier-2 skill, so the number is exact and the evidence
shows the expression. Numbers are read by the skill API (`maestro_graph.numbers`), number words here. A text whose
wording settles no operation (two numbers and no cue word) is declined: a sum of whatever numbers a question
mentions is rarely its answer, since such questions are mostly about a table or chart whose numbers are in the image
(the count: docs/results.md, "The shipped checkpoint"). A question the computed number does not answer is declined
too: a yes/no question, one asking which, who or where, or options none of which is a number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from maestro_graph.answer_forms import asks_yes_no, opens_polar
from maestro_graph.choices import inline_choices, question_stem
from maestro_graph.errors import SkillError
from maestro_graph.numbers import numbers_in, parse_number
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

_WORD_NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "hundred": 100,
    "dozen": 12, "half": 0.5, "twice": 2, "double": 2, "triple": 3,
}
_WORD_RE = re.compile(r"\b(?:" + "|".join(_WORD_NUMBERS) + r")\b", re.I)
# sentences that only say how to answer ("Round to two decimals.", "Answer with a number.") hold no quantities
_INSTRUCTION_RE = re.compile(r"^\s*(answer|round|give|reply|respond|please|select|choose|pick|write|express)\b", re.I)
_RATE_AFTER = re.compile(r"^\s*(?:[a-z-]+\s+){0,3}?(each|apiece|a piece|per|every|"
                         r"an? (hour|day|week|month|minute|year))\b|^\s*(?:[a-z]+)?\s*/\s*[a-z]+|^\s*(mph|kph)\b", re.I)
# "each mug is priced at $5", "a box holds 24", "one bus carries 40": the amount of one unit
_UNIT_BEFORE = re.compile(r"\b(each|every|per|one|a|an)\s+(?P<unit>[\w-]+)\s+(is\s+)?(costs?|priced at|sells? for|is|"
                          r"holds?|contains?|fits?|carries|carry|can (hold|carry|fit)|weighs?|has)\s*$", re.I)
_PREPOSITION_BEFORE = re.compile(r"\b(in|on|at|of|for|from|to|into|with|per)\s+$", re.I)
_UNIT_WORD_AFTER = re.compile(r"^\s*[\w-]+\s+(costs?|is priced|sells)\b", re.I)
_PAYMENT_BEFORE = re.compile(r"(pays?|paid|paying|hands?( over)?|gives? the cashier|with an?|tender\w*)\s*$", re.I)
_PAYMENT_AFTER = re.compile(r"^\s*(bill|note|banknote)", re.I)
_SHARE_RE = re.compile(r"\b(equal|equally|evenly|split|divid\w*|shar\w*|distribut\w*)\b|\b(in|for|to|per|on) each\b"
                       r"|\beach \w+( \w+)? (gets?|receives?|has|have|pays?)\b|\bper (person|child|friend|student)\b",
                       re.I)
_GROUP = r"(groups?|teams?|cartons?|boxes|box|bags?|rows?|packs?|piles?|sets?|trays?|shelves|shelf|tables?|cars?|buses)"
_GROUPING_RE = re.compile(rf"\b(into|in) (\w+ )?{_GROUP}\b|\b{_GROUP} of \d", re.I)
_GROUP_QUESTION_RE = re.compile(rf"\bhow many (\w+ )?{_GROUP}\b|\beach\b", re.I)
_AVERAGE_RE = re.compile(r"\b(average|mean)\b", re.I)
_TIMES_RE = re.compile(r"\b(times (as|more)|twice|double|triple|half)\b", re.I)
# verbs that take away from or add to a running amount, read next to each quantity
_LOSS_RE = re.compile(r"\b(gave|give|gives|given|sold|sells|spent|spends|lost|loses|ate|eats|used|uses|broke|"
                      r"donated|took|takes|removed|get off|gets off|got off|left|leave|leaves|paid|pays|minus|"
                      r"away|less|fewer)\b", re.I)
_GAIN_RE = re.compile(r"\b(plus|added|adds|found|finds|received|receives|got|gets|get on|got on|bought|buys|"
                      r"earned|earns|collected|collects|more|another|joined|join|arrived)\b", re.I)
_ADD_QUESTION_RE = re.compile(r"\b(total|altogether|in all|combined|together|sum|all together|both)\b", re.I)
_COMPARE_QUESTION_RE = re.compile(r"\bhow (much|many) (\w+ )?(more|fewer|less|longer|shorter|taller|older|younger|"
                                  r"heavier|lighter|farther|further|bigger|larger|smaller)\b|\bdifference\b|\bthan\b",
                                  re.I)
# "How many muffins did it sell?" asks for the total of the sales, not what is left after them
_ASKS_LOSS_RE = re.compile(r"\b(sell|sold|spend|spent|eat|ate|use|used|give|gave|lose|lost|pay|paid|donate|donated)\b",
                           re.I)
_REMAINDER_QUESTION_RE = re.compile(r"\b(left|remain\w*|now|still|end up|after)\b", re.I)
_DISCOUNT_RE = re.compile(r"\b(off|discount\w*|reduc\w*|decreas\w*|sale|cheaper|markdown)\b", re.I)
_INCREASE_RE = re.compile(r"\b(increas\w*|rais\w*|tax|tip|markup|grows?|grew|interest)\b", re.I)
# "How much do you save?" or "How much is the tip?" asks for the percentage part itself, not the new amount
_ASKS_PART_RE = re.compile(r"\b(save|saved|saving|savings)\b|\b(how much|what) (is|was|will be) the (amount of )?"
                           r"(discount|tax|tip|interest)\b|\bhow much (discount|tax|tip|interest)\b", re.I)
_APPLIED_RE = re.compile(r"\b(new|final|after|sale price|now|total|in all|altogether|pay|costs?|price)\b", re.I)
# "Which colour has more cars?", "Who has more?": a thing, a person or a place is asked for, not the computed number
_ASKS_NO_NUMBER_RE = re.compile(r"^\W*(which|who|whose|whom|where|why)\b", re.I)
# "Can you work out how many apples are left?" opens like a yes/no question and asks for a number
_ASKS_QUANTITY_RE = re.compile(r"\b(how|what)\b", re.I)


@dataclass(frozen=True)
class Quantity:
    """A number in the problem with what surrounds it."""

    value: float
    text: str
    money: bool
    percent: bool
    before: str
    after: str

    @property
    def rate(self) -> bool:
        """A per-unit amount: '$3 each', '42 km per hour', '250 grams of flour per cake', 'a box holds 24'."""
        return bool(_RATE_AFTER.match(self.after) or (self.money and _UNIT_BEFORE.search(self.before)))

    @property
    def unit(self) -> str | None:
        """The unit an amount belongs to ('box' in 'a box holds 24'), when the words before it say so."""
        m = _UNIT_BEFORE.search(self.before)
        return m.group("unit").lower() if m else None

    def counts(self, unit: str) -> bool:
        """Whether this quantity counts `unit`s ('5 boxes' counts 'box')."""
        word = re.match(r"\s*([\w-]+)", self.after)
        return bool(word) and _same_noun(word.group(1), unit)

    @property
    def payment(self) -> bool:
        return self.money and bool(_PAYMENT_BEFORE.search(self.before) or _PAYMENT_AFTER.match(self.after))


def _same_noun(a: str, b: str) -> bool:
    """'boxes' ~ 'box', 'buses' ~ 'bus', 'cakes' ~ 'cake' (plural endings only, no dictionary)."""
    def forms(word: str) -> set[str]:
        word = word.lower()
        return {word, word[:-1] if word.endswith("s") else word, word[:-2] if word.endswith("es") else word}

    return bool(forms(a) & forms(b))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.?!])\s+(?=[A-Z$0-9])", text.strip()) if s.strip()]


def _numbers(sentence: str) -> list[tuple[int, int, float | str, bool, bool]]:
    """(start, end, value, money, percent) of each quantity in order: numbers as the skill API reads them (no sign:
    "5-year-old" has a dash), and number words (the value is then the word, lower case)."""
    written = [(n.start, n.end, float(n.value), n.currency is not None, n.percent)
               for n in numbers_in(sentence, signed=False)]
    words = [(m.start(), m.end(), m.group(0).lower(), False, False) for m in _WORD_RE.finditer(sentence)]
    return sorted(written + words)


def parse_problem(text: str) -> tuple[list[Quantity], str]:
    """The quantities of a word problem and its question sentence (the last one with '?', else the last one)."""
    sentences = [s for s in _sentences(text) if not _INSTRUCTION_RE.match(s)]
    asked = next((s for s in reversed(sentences) if "?" in s), sentences[-1] if sentences else "")
    quantities: list[Quantity] = []
    for sentence in sentences:
        for start, end, value, money, percent in _numbers(sentence):
            if isinstance(value, str):
                word = value
                if word in ("half", "double", "twice", "triple") and not quantities:
                    continue  # a multiplier with nothing before it to scale
                if word == "one" and (_UNIT_WORD_AFTER.match(sentence[end:]) or
                                      _PREPOSITION_BEFORE.search(sentence[:start])):
                    continue  # "One ticket costs $8", "in one box": naming a unit, not a quantity to compute with
                value = float(_WORD_NUMBERS[word])
            quantities.append(Quantity(value, sentence[start:end].strip(), money, percent,
                                       sentence[max(0, start - 30):start], sentence[end:end + 30]))
    return quantities, asked


_EXPRESSION_RE = re.compile(
    r"^\s*(?:(?:what|how much) is|what's|compute|calculate|evaluate|work out|find)?\s*"
    r"(?P<expr>[(\s]*\d[\d.,\s()]*(?:[-+*/×÷^][(\s]*\d[\d.,\s()]*)+)\s*(?:=\s*\??)?\s*[?.!]?\s*$", re.I)
"""A question that is a written calculation and nothing else ("What is 17 * 23?", "(3 + 4) × 5 = ?")."""


def _written_expression(text: str) -> str | None:
    """The calculator expression of a question that is a written calculation, else None."""
    match = _EXPRESSION_RE.match(text)
    if match is None or match.group("expr").count("(") != match.group("expr").count(")"):
        return None
    expression = re.sub(r"(?<=\d),(?=\d{3}\b)", "", match.group("expr"))  # thousands separators
    return " ".join(expression.replace("×", "*").replace("÷", "/").replace("^", "**").split()).rstrip(".")


def plan(text: str) -> tuple[str, str, float] | None:
    """(operation, calculator expression, confidence) for a written calculation or a word problem, or None without
    two quantities or without a cue to the operation."""
    expression = _written_expression(text)
    if expression is not None:
        return "written calculation", expression, 0.95
    given, asked = parse_problem(text)
    if len(given) < 2:
        return None
    v = [_num(q.value) for q in given]
    percents = [q for q in given if q.percent]
    others = [q for q in given if not q.percent]
    if percents and others:
        base = max(others, key=lambda q: (q.money, q.value))
        p = _num(percents[0].value)
        applied = _APPLIED_RE.search(asked) and not _ASKS_PART_RE.search(asked)
        if applied and _DISCOUNT_RE.search(text):
            return "percent decrease", f"{_num(base.value)}*(1 - {p}/100)", 0.8
        if applied and _INCREASE_RE.search(text):
            return "percent increase", f"{_num(base.value)}*(1 + {p}/100)", 0.7
        return "percent of", f"{_num(base.value)}*{p}/100", 0.8
    payment = next((q for q in given if q.payment), None)
    if payment is not None and re.search(r"\b(change|back|left|remain\w*|receive)\b", asked, re.I):
        rest = [q for q in given if q is not payment]
        return "change", f"{_num(payment.value)} - ({_cost(rest)})", 0.8
    if _AVERAGE_RE.search(asked):
        listed = [_num(q.value) for q in given if q.text[:1].isdigit()]  # "three days were 18, 21 and 24"
        listed = listed if len(listed) >= 2 else v
        return "average", f"({' + '.join(listed)})/{len(listed)}", 0.8
    # "a box holds 24 ... in 5 boxes": an amount per unit times a count of those units
    rated = any(q.rate for q in given) or any(q.unit and any(o.counts(q.unit) for o in given if o is not q)
                                              for q in given)
    grouping = _GROUPING_RE.search(text) and _GROUP_QUESTION_RE.search(asked)
    per_unit_asked = re.search(r"\b(per|for each|each) \w+\W*$", asked, re.I)  # "how many miles per gallon?"
    if not rated and (_SHARE_RE.search(text) or grouping or per_unit_asked):
        big = max(given, key=lambda q: q.value)
        rest = [_num(q.value) for q in given if q is not big]
        return "sharing equally", f"{_num(big.value)}/({'*'.join(rest)})", 0.75
    if rated or _TIMES_RE.search(text):
        return "rate times amount", _cost(given), 0.75
    if _ADD_QUESTION_RE.search(asked):
        return "total", " + ".join(v), 0.8
    if _COMPARE_QUESTION_RE.search(asked) and len(v) == 2:
        return "difference", f"Abs({v[0]} - {v[1]})", 0.75
    if _REMAINDER_QUESTION_RE.search(asked) or (_LOSS_RE.search(text) and not _ASKS_LOSS_RE.search(asked)):
        signs = [_sign(q, default="-") for q in given[1:]]
        if "-" in signs:
            return "net change", v[0] + "".join(f" {s} {x}" for s, x in zip(signs, v[1:])), 0.7
    if _GAIN_RE.search(text) or len(v) > 2:
        return "total", " + ".join(v), 0.6
    return None


def _sign(q: Quantity, *, default: str) -> str:
    """'-' when the verb nearest a quantity takes away ('gave 5', '15 people get off'), '+' when it adds."""
    after = [(m.start(), "-") for m in _LOSS_RE.finditer(q.after[:20])] + \
        [(m.start(), "+") for m in _GAIN_RE.finditer(q.after[:20])]
    before = [(len(q.before) - m.end(), "-") for m in _LOSS_RE.finditer(q.before[-25:])] + \
        [(len(q.before[-25:]) - m.end(), "+") for m in _GAIN_RE.finditer(q.before[-25:])]
    nearest = min(after + before, default=None)
    return nearest[1] if nearest else default


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _cost(quantities: list[Quantity]) -> str:
    """What a list of quantities costs: with several prices, each price times the count before it, summed; with one
    price (or none), the product of all (3 boxes of 12 at $2 each; 8 hours a day for 5 days at $15 an hour)."""
    prices = [q for q in quantities if q.money]
    if len(prices) <= 1:
        return "*".join(_num(q.value) for q in quantities) or "0"
    terms, pending = [], []
    for q in quantities:
        if not q.money:
            pending.append(_num(q.value))
            continue
        terms.append("*".join([*pending, _num(q.value)]) if q.rate or pending else _num(q.value))
        pending = []
    terms += pending
    return " + ".join(terms)


def _format(value: str) -> str:
    """Calculator text as a short decimal answer ('20/3' -> '6.67', '172.350000' -> '172.35')."""
    number = parse_number(value)
    if number is None:
        raise SkillError(f"calculator returned {value!r}, not a number")
    if "/" in value:
        number = float(value.split("/")[0]) / float(value.split("/")[1])
    rounded = round(number, 2)
    return str(int(rounded)) if math.isclose(rounded, round(rounded)) else f"{rounded:.2f}".rstrip("0").rstrip(".")


def _unplanned(problem: str) -> str:
    """Why `plan` found no word problem in `problem`."""
    quantities, _ = parse_problem(problem)
    if len(quantities) < 2:
        return f"found {len(quantities)} quantity in the text; a word problem needs two or more"
    return f"found {len(quantities)} quantities and no word saying what to do with them"


def _option_values(request: str, choices: list[str]) -> list[float | None]:
    """Each option's number: its own text's, else (lettered options) the value written for it in the question."""
    values = [parse_number(c) for c in choices]
    written = inline_choices(request)
    if all(v is None for v in values) and written and len(written) == len(choices):
        values = [parse_number(w) for w in written]
    return values


def _not_a_number(request: str, asked: str, choices: list[str] | None) -> str | None:
    """Why the computed number cannot answer the question: no option is a number (True/False, names), or without
    options the question asks yes or no ("Does he have enough money?") or for a thing or a person ("Which colour
    has more cars?"); None when a number answers it."""
    if choices:
        numbered = any(v is not None for v in _option_values(request, choices))
        return None if numbered else "no option is a number to match the computed value against"
    if asks_yes_no(request) or ("?" in asked and opens_polar(asked) and not _ASKS_QUANTITY_RE.search(asked)):
        return "the question asks yes or no, not for a computed number"
    if _ASKS_NO_NUMBER_RE.search(asked):
        return "the question asks which, who or where, not for a computed number"
    return None


def _solvable(request: str, choices: list[str] | None) -> tuple[str, str, float] | str:
    """The plan (operation, expression, confidence) of a word problem whose answer is the computed number, else why
    the request is not one: the one check `declines` and `run` share, so they never disagree."""
    problem = question_stem(request)
    planned = plan(problem)
    if planned is None:
        return _unplanned(problem)
    return _not_a_number(request, parse_problem(problem)[1], choices) or planned


def declines(request: str, choices: list[str] | None) -> str | None:
    """A text with fewer than two quantities, or whose wording settles no operation, is no word problem this skill
    solves; a question a number does not answer is not one for it either: declined before any call. Options
    written in the text are not givens ("(a) 0.5 (b) 2" is no sum)."""
    solvable = _solvable(request, choices)
    return solvable if isinstance(solvable, str) else None


def run(ctx: SkillContext) -> SkillResult:
    solvable = _solvable(ctx.request, ctx.choices)
    if isinstance(solvable, str):
        return SkillResult(evidence=solvable, answer=None, confidence=0.0)
    operation, expression, confidence = solvable
    value = _format(str(ctx.use("calculator", expression=expression)))
    evidence = f"{operation}: {expression} = {value}"
    if ctx.choices:
        values = _option_values(ctx.request, ctx.choices)
        distance, option = min((abs(n - float(value)), c) for c, n in zip(ctx.choices, values) if n is not None)
        return SkillResult(evidence=f"{evidence}; closest option {option}", answer=option,
                           confidence=confidence if distance < 1e-6 else confidence / 2)
    return SkillResult(evidence=evidence, answer=value, confidence=confidence)
