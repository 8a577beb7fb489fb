"""The answer forms of the skill API (what form a question asks for, which forms a candidate has) and the yes/no
readings they rest on; the features the neural policy uses to choose among candidates."""

from __future__ import annotations

import pytest

from maestro_graph.answer_forms import FORM_DIM, asks_yes_no, candidate_form, expected_form, opens_polar
from maestro_graph.scoring import is_yes_no, yes_no, yes_no_in


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


@pytest.mark.parametrize("text, scored, plain, found", [
    ("Yes", "yes", True, "yes"),
    ("true.", "yes", True, "yes"),
    ("No it is not", "no", False, "no"),
    ("correct", "yes", False, None),
    ("n", "no", False, None),
    ("The answer is: False.", None, False, "no"),
    ("Nothing here", None, False, None),
    ("", None, False, None),
])
def test_yes_no_is_read_in_one_place_three_ways(text, scored, plain, found):
    """scoring reads a prediction's first word (lenient: y/n, correct/incorrect too); an answer *is* a yes/no one
    when it is one or two words opening with yes, no, true or false (the answer forms and the policy's features);
    a model's reply is read by the first such word anywhere in it (the vision-chat procedure)."""
    assert (yes_no(text), is_yes_no(text), yes_no_in(text)) == (scored, plain, found)
    if text:
        assert candidate_form(text, "yesno", None)[0] == float(plain)


@pytest.mark.parametrize("question, choices, asked", [
    ("Is the bar above 30? Please answer yes or no.", None, True),
    ("True or false: the line rises.", None, True),
    ("Is it odd or even?", None, False),  # opens like a yes/no question, but does not say to answer yes or no
    ("Does the line rise?", ["Yes", "No"], True),  # options that are Yes and No
    ("Does the line rise? Answer yes or no.", ["Yes", "No", "Maybe"], False),  # other options: a choice
    ("Which is larger?", ["yes.", "NO"], True),
])
def test_asks_yes_no_reads_the_wording_or_the_options(question, choices, asked):
    assert asks_yes_no(question, choices) is asked


@pytest.mark.parametrize("question, polar", [
    ("Are there more than 5 circles?", True), ("  could the line cross?", True), ("How many circles?", False),
    ("Isolate the red bar.", False), ("What is shown? Is it red?", False),
])
def test_opens_polar_is_the_auxiliary_verb_opening_expected_form_reads(question, polar):
    assert opens_polar(question) is polar
    assert (expected_form(question, None) == "yesno") is polar
