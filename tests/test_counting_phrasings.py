"""A counting question is one however it is phrased, and no skill answers from relations among the options alone.
Real skills, real experts, the real graph with the shipped policy, on the example picture of
7 circles."""

from __future__ import annotations

from pathlib import Path

import pytest

from maestro_graph.choices import inline_choices
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import ActionSpace, EpisodeView, make_policy
from maestro_graph.types import Invoke

CIRCLES = str(Path(__file__).resolve().parents[1] / "examples" / "circles.png")  # 7 circles
STATEMENTS = ("Which statement is true? A. There are 3 circles; B. There are 7 circles; C. There are 9 circles; "
              "D. There are no circles")
COUNTING = Invoke("opencv-vision", "counting")


@pytest.mark.parametrize(("question", "answer"), [
    (STATEMENTS, "There are 7 circles"),
    ("Which statement is true? A. There are no circles; B. There are more than 5 circles",
     "There are more than 5 circles"),
    ("Is the number of circles greater than 5?", "Yes"),
    ("Are there more than 8 circles in the image?", "No"),
    ("Are there fewer than 9 circles in the image?", "Yes"),
    ("Are there exactly seven circles?", "Yes"),
    ("Are there 6 circles in the image?", "No"),
])
def test_the_count_answers_statements_and_yes_no_claims(registry, question, answer):
    step = registry.run(COUNTING, question=question, images=[CIRCLES], choices=inline_choices(question))
    assert step.answer == answer, step.evidence
    assert step.confidence >= 0.8 and "7 circle(s) found" in step.evidence


@pytest.mark.parametrize(("question", "declined"), [
    (STATEMENTS, False),
    ("Is the number of circles greater than 5?", False),
    ("Are the two circles touching each other?", False),  # contact, as before
    ("Is the circle in image 2 red?", True),  # a number that counts nothing
    ("Which statement is true? A. The circle is red; B. The circle is blue", True),  # no claim about a count
    ("As shown in the figure, AB is the diameter of circle O. Find angle C. A. 30°; B. 45°; C. 60°", True),
])
def test_counting_declines_only_questions_that_make_no_count(registry, question, declined):
    space = ActionSpace.build(registry, EpisodeView(question, (CIRCLES,), inline_choices(question), (), 4, 10.0))
    assert ("counting" in dict(space.declined)) == declined


def test_visual_math_does_not_answer_from_relations_among_the_options(registry):
    """It used to find "9/3 = 3 matches There are 3 circles" (the options' own numbers taken for givens) and answer
    it as a relation; with no given in the question or the figure, only its marked prior is left."""
    step = registry.run(Invoke("rapidocr", "visual-math"), question=STATEMENTS, images=[CIRCLES],
                        choices=inline_choices(STATEMENTS))
    assert "matches" not in step.evidence and "givens []" in step.evidence, step.evidence
    assert "prior" in step.evidence and step.confidence <= 0.15


@pytest.mark.slow
def test_the_shipped_policy_answers_the_statement_question_by_counting(registry):
    result = run_episode(build_graph(registry, make_policy("neural")), STATEMENTS, [CIRCLES])
    assert result.answer == "There are 7 circles", [(s.pair, s.answer, s.evidence) for s in result.steps]
