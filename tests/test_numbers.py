"""The skill API's one reader of written numbers (`maestro_graph.numbers`): the cases each skill's own copy handled
before it was folded in (chart labels, table cells, word problems, OCR lines, model replies, geometry givens), and
properties over generated numbers written in every way the reader knows."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from maestro_graph.numbers import first_number, numbers_in, parse_number, whole_number


@pytest.mark.parametrize("text, value", [
    ("1,234", 1234), ("$1,234.50", Fraction("1234.5")), ("-40", -40), ("−2.5", Fraction("-2.5")),  # Unicode minus
    ("–7", -7), ("+3", 3), (".5", Fraction(1, 2)), ("3/4", Fraction(3, 4)), ("3+1/2", Fraction(7, 2)),
    ("45%", 45), ("50 percent", 50), ("2.5M", Fraction(5, 2)), ("1e3", 1000), ("1E-4", Fraction(1, 10000)),
    ("€12", 12), ("RM 12.50", Fraction(25, 2)), ("-$5", -5), ("(35%)", 35),
])
def test_one_number_reads_its_value_as_written(text, value):
    found = first_number(text)
    assert found is not None and found.value == value and found.text == text.strip("()")


@pytest.mark.parametrize("text, flags", [
    ("$5", ("$", False, None, False)), ("RM5", ("RM", False, None, False)), ("£3.20", ("£", False, None, False)),
    ("45%", (None, True, None, False)), ("12 per cent", (None, True, None, False)),
    ("10k", (None, False, "k", False)), ("2.5M", (None, False, "m", False)), ("3B", (None, False, "b", False)),
    ("3/4", (None, False, None, True)), ("1+1/10", (None, False, None, True)), ("7", (None, False, None, False)),
])
def test_currency_percent_suffix_and_fraction_are_flags_beside_the_value(text, flags):
    found = first_number(text)
    assert (found.currency, found.percent, found.suffix, found.fraction) == flags


@pytest.mark.parametrize("text, scaled", [("10k", 10_000), ("2.5M", 2_500_000), ("3B", 3e9), ("45%", 45), ("7", 7)])
def test_scaled_applies_the_suffix_only(text, scaled):
    assert first_number(text).scaled == scaled


@pytest.mark.parametrize("text, values", [
    ("5-10 apples", [5, 10]),  # a dash between numbers, not a minus
    ("Apr-18 and x-5", [18, 5]),
    ("(3,-4)", [3, -4]),
    ("On 12/25/2020 at 5", [12, 25, 2020, 5]),  # a date is not a fraction
    ("1/0 of it", [1, 0]),  # nor a fraction over zero
    ("1,2345", [1, 2345]),  # not thousands: a group has three digits
    ("1.2.3", [Fraction("1.2")]),
    ("a 5 km walk, 5m rope, 5 m tall", [5, 5, 5]),
])
def test_what_is_not_one_number(text, values):
    assert [n.value for n in numbers_in(text)] == values


def test_spans_point_at_the_number_as_written():
    text = "Tom paid $1,200.50 for 3 chairs, a 15% discount."
    found = numbers_in(text)
    assert [text[n.start:n.end] for n in found] == ["$1,200.50", "3", "15%"] == [n.text for n in found]


def test_unsigned_and_ungrouped_readings():
    assert [n.value for n in numbers_in("a 5-year-old, -3", signed=False)] == [5, 3]
    assert [n.value for n in numbers_in("(100,200)")] == [100200]
    assert [n.value for n in numbers_in("(100,200)", grouped=False)] == [100, 200]


@pytest.mark.parametrize("text, value", [
    ("1,200", 1200), ("-5", -5), ("35%", 35), ("2.5M", 2_500_000), ("$40", 40), ("(8", 8), ("13)", 13),
    ("$1,024.00", 1024), (" 7 ", 7), ("Sales 5", None), ("5 apples", None), ("12-15", None), ("", None),
])
def test_whole_number_is_a_text_that_is_one_number_and_nothing_else(text, value):
    found = whole_number(text)
    assert (None if found is None else found.scaled) == value


@pytest.mark.parametrize("text, value", [
    ("$1,234.5", 1234.5), ("45%", 45), ("3/4", 0.75), ("3 / 4", 0.75), ("{7}", 7), ("\\frac{20}{3}", 20 / 3),
    ("\\dfrac{1}{4}", 0.25), ("−2.5 cm", -2.5), ("The answer is 12.", 12), ("no digits", None), (None, None),
    (3, 3.0), ("１２", 12),  # full-width digits (NFKC)
])
def test_parse_number_reads_a_short_answer_as_scoring_does(text, value):
    assert parse_number(text) == (None if value is None else pytest.approx(value))


def _written(value: Fraction, rng: random.Random) -> tuple[str, dict]:
    """`value` written one of the ways the reader knows, with the flags it should report."""
    whole, cents = divmod(abs(value), 1)
    digits = f"{int(whole):,}" if rng.random() < 0.5 else str(int(whole))
    if cents:
        digits += "." + f"{float(cents):.2f}"[2:]
    sign = "" if value >= 0 else rng.choice(["-", "−", "–"])
    currency = rng.choice(["", "$", "€", "£", "RM"])
    percent = rng.choice(["", "%", " percent"]) if not currency else ""
    return f"{sign}{currency}{digits}{percent}", {"currency": currency or None, "percent": bool(percent)}


@pytest.mark.parametrize("seed", range(5))
def test_any_number_written_any_known_way_reads_back_in_a_sentence(seed):
    rng = random.Random(seed)
    for _ in range(200):
        value = Fraction(rng.randint(-10**7, 10**7), rng.choice([1, 100]))
        text, flags = _written(value, rng)
        sentence = f"The {rng.choice(['total', 'value', 'x'])} is {text}, it says."
        found = numbers_in(sentence)
        assert len(found) == 1, (sentence, found)
        number = found[0]
        assert number.value == value and number.text == text, sentence
        assert {"currency": number.currency, "percent": number.percent} == flags, sentence
        assert whole_number(text).value == value and parse_number(text) == pytest.approx(float(value))
