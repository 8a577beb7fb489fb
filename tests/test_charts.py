"""chart-qa on real ChartBench statements, with both OCR models: printed labels, pie labels, axis reading, chart
type."""

from __future__ import annotations

import pytest
from conftest import real_tasks

from maestro_graph.scoring import score
from maestro_graph.types import Invoke

TASKS = real_tasks("charts")


def _run(registry, model: str, task):
    return registry.run(Invoke(model, "chart-qa"), question=task.question, images=task.images, choices=task.choices)


@pytest.mark.slow
def test_tesseract_accuracy_floor(registry):
    """Labelled bars/pies/scatter points, axis reading and the chart-type check: the current code gets all 9."""
    right = 0
    for task in TASKS:
        step = _run(registry, "tesseract", task)
        assert step.error is None, step.error
        assert step.answer in ("Yes", "No") and step.evidence
        right += score(step.answer, task.answer, task.answer_type)
    assert right >= 7, f"{right}/{len(TASKS)}"


def test_rapidocr_reads_pie_labels(registry):
    """'Name: value' pie labels are split into a name and a number; the largest one confirms the 'highest' claim."""
    task = next(t for t in TASKS if "Facebook has the highest" in t.question)
    step = _run(registry, "rapidocr", task)
    assert step.error is None, step.error
    assert step.answer == task.answer == "Yes"
    assert "40" in step.evidence


def test_without_image_is_an_input_error(registry):
    step = registry.run(Invoke("tesseract", "chart-qa"), question="Is the bar for 2020 higher? Yes or No", images=[])
    assert step.answer is None and step.error_kind == "input"


@pytest.mark.parametrize("question", ["What is the value of Nothing at Nowhere?"])
def test_unreadable_question_gives_no_answer(registry, question):
    """An open question naming nothing in the chart returns None rather than a made-up value."""
    task = next(t for t in TASKS if "Facebook has the highest" in t.question)
    step = registry.run(Invoke("tesseract", "chart-qa"), question=question, images=task.images)
    assert step.error is None and step.answer is None
