"""The math area: the SymPy expert, the calculator skill and visual-math on real geometry items (real models)."""

from __future__ import annotations

import pytest
from conftest import real_tasks

from maestro_graph.errors import ExpertError
from maestro_graph.experts.sympy_math import SympyMathExpert
from maestro_graph.scoring import score
from maestro_graph.types import Invoke

# the sample holds 5 mathvista items the relation search answers, 3 visonlyqa figure questions and 2 mathverse
# items (one free-form, which gets no answer); the current code gets FLOOR or more with margin
FLOOR = 5


@pytest.fixture(scope="module")
def sympy_expert() -> SympyMathExpert:
    return SympyMathExpert()


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("\\frac{20}{3}", "20/3"),
        ("5√{3}", "8.66025403784"),
        ("(30√3+30)", "81.9615242271"),
        ("sin(30°)", "1/2"),
        ("180 - 2*35", "110"),
        ("hypotenuse(8, 15) / 2", "17/2"),
        ("2^10", "1024"),
        ("x + x", "2*x"),
    ],
)
def test_evaluate_reads_question_notation(sympy_expert, expression, value):
    assert sympy_expert.evaluate(expression) == value


def test_solve_single_unknown_and_systems(sympy_expert):
    assert sympy_expert.solve(["2x + 3 = 11"], "x") == ["4"]
    assert sympy_expert.solve(["AB^2 = 8^2 + 15^2"], "AB") == ["-17", "17"]
    assert sympy_expert.solve(["a + b = 10", "a - b = 2"]) == ["a = 6, b = 4"]


@pytest.mark.parametrize("bad", ['__import__("os")', "x.__class__", "lambda: 1", "", "a = b = c", "x ="])
def test_unsafe_or_malformed_input_is_an_expert_error(sympy_expert, bad):
    with pytest.raises(ExpertError):
        sympy_expert.evaluate(bad)


def test_solve_rejects_unknown_that_is_absent(sympy_expert):
    with pytest.raises(ExpertError, match="does not occur"):
        sympy_expert.solve(["x + 1 = 2"], "y")


def _run(registry, model, task):
    return registry.run(Invoke(model, "visual-math"), question=task.question, images=task.images, choices=task.choices)


@pytest.mark.slow  # about 20 s: OCR and the calculator on the whole real sample, like test_tables' accuracy floor
def test_visual_math_rapidocr_accuracy_floor(registry):
    tasks = real_tasks("math")
    steps = [_run(registry, "rapidocr", t) for t in tasks]
    assert all(s.error is None for s in steps), [s.error for s in steps if s.error]
    right = sum(score(s.answer, t.answer, t.answer_type, tolerance=t.tolerance, choices=t.choices)
                for s, t in zip(steps, tasks))
    assert right >= FLOOR, [(t.id, s.answer, t.answer, s.evidence[:120]) for s, t in zip(steps, tasks)]


def test_relation_answer_is_checked_with_the_calculator(registry):
    task = next(t for t in real_tasks("math") if t.source == "mathvista")
    step = _run(registry, "rapidocr", task)
    assert any(call["model"] == "sympy" for call in step.calls), step.calls
    assert "matches" in step.evidence


def test_free_form_question_gets_no_guess(registry):
    task = next(t for t in real_tasks("math") if t.source == "mathverse" and not t.choices)
    step = _run(registry, "rapidocr", task)
    assert step.error is None
    assert step.answer is None and "free-form" in step.evidence
