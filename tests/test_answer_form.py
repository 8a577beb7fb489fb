"""The answer-form features the neural policy uses to choose among candidates."""

from __future__ import annotations

import pytest

from maestro_graph.core.answer_form import FORM_DIM, candidate_form, expected_form


@pytest.mark.parametrize("question, choices, form", [
    ("Is the red bar higher than the blue one? Please answer Yes or No.", None, "yesno"),
    ("Does the line cross the circle?", None, "yesno"),
    ("There is a triangle ABD in the figure. True or False?", ["True", "False"], "choice"),
    ("How many books had at least 40 characters?", None, "number"),
    ("What is the company name on the receipt?", None, "text"),
])
def test_expected_form_from_the_wording_and_options(question, choices, form):
    assert expected_form(question, choices) == form


def test_candidate_form_flags_a_number_given_to_a_yes_no_question():
    number = candidate_form("9", "yesno", None)
    no = candidate_form("No", "yesno", None)
    assert len(number) == len(no) == FORM_DIM
    assert number[:5] == [0.0, 1.0, 0.0, 0.0, 1.0]  # a number, not the form asked for: contradicts it
    assert no[:5] == [1.0, 0.0, 0.0, 1.0, 0.0]


def test_candidate_form_knows_options_by_letter_or_text():
    choices = ["A. 3 cm", "B. 4 cm"]
    assert candidate_form("B", "choice", choices)[2:5] == [1.0, 1.0, 0.0]
    assert candidate_form("4 cm", "choice", choices)[2:5] == [1.0, 1.0, 0.0]
    assert candidate_form("7 cm", "choice", choices)[2:5] == [0.0, 0.0, 1.0]
    assert candidate_form("ACME LTD", "text", None)[3:5] == [0.0, 0.0]  # free text: neither has nor contradicts
