"""Options written inline in a question: read as choices when they are options, never out of ordinary text, and the
prior guess among them. The questions are hand-written in the styles of real benchmarks (geometry and math items
with lettered options, chart and table questions, document fields), both with and without options."""

from __future__ import annotations

from pathlib import Path

import pytest

from maestro_graph.choices import YES_NO_GUESS, guess_option, inline_choices, names_option
from maestro_graph.core.tasks import Task
from maestro_graph.episode.answer import final_answer
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy
from maestro_graph.types import Step

WITH_OPTIONS = [
    ("In the triangle shown, what is the measure of the angle at B? A. 30°; B. 60°; C. 90°", ["30°", "60°", "90°"]),
    ("Find the length of the side x.\nChoices:\nA. 4\nB. 5\nC. 6\nD. 7", ["4", "5", "6", "7"]),
    ("Which shape has the largest area? (A) the square (B) the circle (C) the triangle",
     ["the square", "the circle", "the triangle"]),
    ("Estimate the angle DEF in the figure. (a) 45 degrees (b) 90 degrees (c) 135 degrees\n\n"
     "Answer with the letter only.", ["45 degrees", "90 degrees", "135 degrees"]),
    ("Choices: A: 12 cm B: 14 cm C: 16 cm", ["12 cm", "14 cm", "16 cm"]),
    ("What is the slope of the line?\nA) 1/2\nB) 2\nC) -2\nD) -1/2", ["1/2", "2", "-2", "-1/2"]),
    ("As shown in the figure, AB is a diameter of the circle and angle C is 40. What is angle A?\n"
     "Choices:\nA:50°\nB:40°\nC:60°\nD:80°", ["50°", "40°", "60°", "80°"]),
    ("Which function is graphed? Options: (A) y=x^2 (B) y=2^x (C) y=log x (D) y=1/x",
     ["y=x^2", "y=2^x", "y=log x", "y=1/x"]),
    ("Is the graph increasing or decreasing? A. increasing B. decreasing", ["increasing", "decreasing"]),
    ("Select the best estimate of the distance: a) 3 km b) 30 km c) 300 km", ["3 km", "30 km", "300 km"]),
    ("How many faces does the solid have? A. 4, B. 5, C. 6, D. 8", ["4", "5", "6", "8"]),
    ("Find the true bearing of C from A.\nChoice:\nA. 045° T\nB. 135° T\nC. 225° T\nChoice:\nA. 045° T\nB. 135° T\n"
     "C. 225° T", ["045° T", "135° T", "225° T"]),
    ("What is the value of x? A. 2 or B. 3", ["2", "3"]),
    ("Which statement is true?\nA. The function has one root.\nB. The function has two roots.\n"
     "C. The function has no real roots.",
     ["The function has one root.", "The function has two roots.", "The function has no real roots."]),
    ("The perimeter of the rectangle is: (A) 18 (B) 20 (C) 22 (D) 24 (E) 26", ["18", "20", "22", "24", "26"]),
    ("Which colour has the highest value in the bar chart?\n(A) red\n(B) blue\n(C) green", ["red", "blue", "green"]),
]

WITHOUT_OPTIONS = [
    "How many circles are in the image? Answer with only the number in numerical format.",
    "Compute (a) the area and (b) the perimeter of the rectangle.",
    "Plan A: walk to school. Plan B: take the bus. Which plan takes less time according to the chart?",
    "Consider the point A.\n\nFind the true bearing of A from B.",
    "While doing a project for P. E. class, Dana counted the athletes per country. How many countries have 12?",
    "According to this chart, the node Paper A connects to node Paper B. Please answer Yes or No.",
    "According to this chart, at Quarter Q2, the Sales of Product A is higher than Product B. Please answer Yes or No.",
    "What is the total amount on the receipt?",
    "Which company has the highest revenue in 2019, Company A or Company B?",
    "What is the value of f(a) when a = 2?",
    "Points A, B and C lie on the circle. What is the measure of angle ACB?",
    "In the table, how many students scored grade A. B students are not counted.",
    "What is the y-coordinate of point A? Round to the nearest hundredth.",
    "Find the area of triangle ABC if AB = 4 and BC = 5.",
    "What is the text in the image?",
    "Read the label: A) is the first panel of the figure.",
    "Subplot (a) shows the loss. What is the lowest value in subplot (a)?",
    "What is the name of the curve closest to Setting A at round 300?",
    "Vitamin A: 20%. What percentage of the daily value does the serving provide?",
]


@pytest.mark.parametrize("question,options", WITH_OPTIONS)
def test_inline_options_are_read_as_choices(question, options):
    assert inline_choices(question) == options


@pytest.mark.parametrize("question", WITHOUT_OPTIONS)
def test_ordinary_text_is_never_read_as_options(question):
    assert inline_choices(question) is None


def test_the_test_set_is_large_enough_both_ways():
    assert len(WITH_OPTIONS) + len(WITHOUT_OPTIONS) >= 30 and len(WITH_OPTIONS) >= 12 and len(WITHOUT_OPTIONS) >= 12


def test_an_answer_names_an_option_by_letter_or_by_text():
    options = ["30°", "60°", "90°"]
    assert names_option("B", options) and names_option("60°", options) and names_option("(c)", options)
    assert not names_option("45", options) and not names_option(None, options)


def test_the_guess_follows_the_experts_numbers_then_their_words():
    assert guess_option(["30°", "60°", "90°"], ["58"], "What is the angle?") == "60°"
    assert guess_option(["the square", "the circle"], ["a large circle in the middle"], "Which shape?") == "the circle"
    # a one-letter option is not named by the article "a" in an expert's words
    letters = ["a", "b", "c", "d", "e"]
    picks = {guess_option(letters, ["a line was found"], f"Which option estimates angle {i}?") for i in range(40)}
    assert picks == set(letters)


def test_a_guess_with_nothing_to_go_on_is_uniform_over_questions_and_fixed_per_question():
    options = ["red", "blue", "green", "white"]
    picks = [guess_option(options, [], f"What colour is object {i}?") for i in range(400)]
    counts = {o: picks.count(o) for o in options}
    assert all(70 <= n <= 130 for n in counts.values()), counts  # 100 each expected; the first is not favoured
    assert picks == [guess_option(options, [], f"What colour is object {i}?") for i in range(400)]


def test_a_letter_answer_to_inline_options_scores_as_the_option():
    task = Task(id="t", question="What is 2+3? A. 4 B. 5 C. 6", answer="5", answer_type="choice")
    assert task.options == ["4", "5", "6"]
    assert task.score("B") == 1.0 and task.score("5") == 1.0 and task.score("A") == 0.0


# -- the graph's answer node, with real experts ---------------------------------------------------------------------

CIRCLES = str(Path(__file__).resolve().parents[1] / "examples" / "circles.png")
NO_CODE = MaestroContext(policy="fixed:zxing@@barcode-reading")  # a real reader that finds nothing in the circles


@pytest.fixture(scope="module")
def graph(registry):
    return build_graph(registry, make_policy("rules"))


def _answer_event(graph, question: str, images: list[str], context: MaestroContext) -> dict:
    events = graph.stream({"question": question, "images": images}, stream_mode="custom", context=context)
    return [e for e in events if e["event"] == "answer"][-1]


def test_inline_options_without_support_end_with_a_marked_guess(graph):
    question = "Which angle is marked in the figure? A. 30°; B. 60°; C. 90°"
    result = run_episode(graph, question, [CIRCLES], context=NO_CODE)
    assert [s.answer for s in result.steps] == [None]
    assert result.answer in {"30°", "60°", "90°"} and result.answer_source == "guess"
    assert result.prediction("t")["answer_source"] == "guess"
    event = _answer_event(graph, question, [CIRCLES], NO_CODE)
    assert event["answer"] == result.answer and event["answer_source"] == "guess"  # the same question, the same guess


def test_a_yes_no_question_nothing_answered_gets_the_default_guess(graph):
    """The policy's only call is an invalid pair (its mistake, an observation): no expert answered at all."""
    result = run_episode(graph, "Is there a triangle in the image? Please answer Yes or No.", [CIRCLES],
                         context=MaestroContext(policy="fixed:zxing@@counting"))
    assert [s.error_kind for s in result.steps] == ["policy"]
    assert result.answer == YES_NO_GUESS and result.answer_source == "guess"


def test_a_free_form_question_nothing_answered_stays_without_an_answer(graph):
    result = run_episode(graph, "What is written on the sign?", [CIRCLES], context=NO_CODE)
    assert result.answer is None and result.answer_source is None


def _ending(question: str, answer: str | None, *answers: str | None) -> tuple[str | None, str | None]:
    steps = [Step(model="m", skill=f"s{i}", answer=a, confidence=0.5) for i, a in enumerate(answers)]
    return final_answer(question, None, answer, steps)


def test_a_free_form_question_the_policy_left_unanswered_takes_the_best_candidate_of_its_form():
    """A number question takes a short number (two readers agreeing on 7 beat one reading 3), never a sentence; a
    free-text question takes any answer; the policy's own answer always wins; an error step offers nothing."""
    assert _ending("How many circles are there?", None, "3", "seven circles found", "7", "7") == ("7", "candidate")
    assert _ending("How many circles are there?", None, "seven circles found") == (None, None)
    assert _ending("What is written on the sign?", None, None, "STOP") == ("STOP", "candidate")
    assert _ending("What is written on the sign?", "EXIT", "STOP") == ("EXIT", "policy")
    errored = Step(model="m", skill="s", answer="12", error="timed out")
    assert final_answer("How many?", None, None, [errored]) == (None, None)


def test_an_explicit_yes_or_no_question_never_ends_with_another_form():
    """"Please answer Yes or No" fixes the form: a table reader's number is replaced by a yes/no candidate or the
    prior; a question that only opens like a yes/no question keeps the policy's answer."""
    question = "According to this chart, the value of Piano is 9.00. Please answer Yes or No."
    assert _ending(question, "9", "9") == (YES_NO_GUESS, "guess")
    assert _ending(question, "9", "9", "Yes") == ("Yes", "candidate")
    assert _ending(question, "yes", "9") == ("yes", "policy")
    assert _ending("Is the number of sides odd or even?", "odd", "odd") == ("odd", "policy")


def test_an_expert_answer_naming_an_option_is_the_policys_not_a_guess(graph):
    result = run_episode(graph, "How many circles are in the image? (A) 5 (B) 7 (C) 9", [CIRCLES],
                         context=MaestroContext(policy="fixed:opencv-vision@@counting"))
    assert result.answer == "7" and result.answer_source == "policy"


def test_an_unreadable_image_is_not_hidden_behind_a_guess(graph, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"GIF89a truncated")
    result = run_episode(graph, "Which code is shown? A. QR code; B. Aztec", [str(bad)], context=NO_CODE)
    assert result.answer is None and result.stop_reason.startswith("input error")
