"""Table QA on real TabMWP items: both OCR experts read a real table, and table-qa answers with each of them."""

from __future__ import annotations

import pytest
from PIL import Image

from maestro_graph.scoring import score
from maestro_graph.types import Invoke
from tests.conftest import REAL, real_tasks

OCR_MODELS = ["rapidocr", "tesseract"]
# Accuracy floors on the 11-item sample (measured: see the report); each leaves a margin of at least one item.
FLOORS = {"rapidocr": 9, "tesseract": 6}


def _price_list() -> Image.Image:
    task = next(t for t in real_tasks("tables") if "cockatoo" in t.question)
    return Image.open(REAL / "tables" / task.images[0]).convert("RGB")


@pytest.mark.parametrize("model", OCR_MODELS)
def test_ocr_expert_reads_a_price_list(registry, model):
    boxes = registry.models[model].expert().ocr(_price_list())
    text = " ".join(b.text for b in boxes).lower()
    assert "cockatoo" in text and "119" in text


@pytest.mark.parametrize("model", OCR_MODELS)
def test_table_qa_accuracy_floor(registry, model):
    tasks = real_tasks("tables")
    right, misses = 0, []
    for task in tasks:
        step = registry.run(Invoke(model, "table-qa"), question=task.question, images=task.images, choices=task.choices)
        assert step.error is None, step.error
        ok = score(step.answer, task.answer, task.answer_type, tolerance=task.tolerance, choices=task.choices)
        right += int(ok)
        if not ok:
            misses.append((task.id, step.answer, task.answer))
    assert right >= FLOORS[model], (right, misses)


def test_answers_multiple_choice_with_option_text_and_shows_operation(registry):
    task = next(t for t in real_tasks("tables") if t.choices and "highest" in t.question)
    step = registry.run(Invoke("rapidocr", "table-qa"), question=task.question, images=task.images, choices=task.choices)
    assert step.answer in task.choices
    assert "max of" in step.evidence and "table:" in step.evidence


def test_exact_money_arithmetic_with_mixed_fraction_quantity(registry):
    task = next(t for t in real_tasks("tables") if "3+1/2" in t.question)
    step = registry.run(Invoke("rapidocr", "table-qa"), question=task.question, images=task.images)
    assert step.answer == "10.50", step.evidence


def test_blank_image_gives_no_answer(registry, tmp_path):
    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 120), "white").save(blank)
    step = registry.run(Invoke("tesseract", "table-qa"), question="What is the mean of the numbers?",
                        images=[str(blank)])
    assert step.error is None and step.answer is None


def test_missing_image_is_an_input_error(registry):
    step = registry.run(Invoke("tesseract", "table-qa"), question="What is the mean of the numbers?", images=[])
    assert step.answer is None and step.error_kind == "input"
