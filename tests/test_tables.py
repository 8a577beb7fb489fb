"""Table QA on real TabMWP items: both OCR experts read a real table, and table-qa answers with each of them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from maestro_graph.core.tasks import Task
from maestro_graph.scoring import score
from maestro_graph.types import Invoke, Step
from tests.conftest import REAL, real_tasks

OCR_MODELS = ["rapidocr", "tesseract"]
# Accuracy floors on the 11-item sample; when written rapidocr answered 11/11 and tesseract 10/11 (it misses the
# single-digit stems of the stem-and-leaf plot).
FLOORS = {"rapidocr": 9, "tesseract": 7}


def _price_list() -> Image.Image:
    task = next(t for t in real_tasks("tables") if "cockatoo" in t.question)
    return Image.open(REAL / "tables" / task.images[0]).convert("RGB")


@pytest.mark.parametrize("model", OCR_MODELS)
def test_ocr_expert_reads_a_price_list(registry, model):
    boxes = registry.models[model].expert().ocr(_price_list())
    text = " ".join(b.text for b in boxes).lower()
    assert "cockatoo" in text and "119" in text


@pytest.fixture(scope="module")
def answered(registry):
    """Each OCR model's table-qa steps on the sample items whose question holds `words` (all of them without), each
    item run once per module (OCR is the slow part): the fast tests read one item each, the accuracy floor all."""
    memo: dict[tuple[str, str], Step] = {}

    def run(model: str, words: str = "") -> list[tuple[Task, Step]]:
        tasks = [t for t in real_tasks("tables") if words in t.question]
        for t in tasks:
            if (model, t.id) not in memo:
                memo[model, t.id] = registry.run(Invoke(model, "table-qa"), question=t.question, images=t.images,
                                                 choices=t.choices)
        return [(t, memo[model, t.id]) for t in tasks]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("model", OCR_MODELS)
def test_table_qa_accuracy_floor(answered, model):
    right, misses = 0, []
    for task, step in answered(model):
        assert step.error is None, step.error
        if score(step.answer, task.answer, task.answer_type, tolerance=task.tolerance, choices=task.choices):
            right += 1
        else:
            misses.append((task.id, step.answer, task.answer, step.evidence))
    assert right >= FLOORS[model], (right, misses)


def _step_for(answered, model: str, words: str) -> tuple[Task, Step]:
    [(task, step)] = answered(model, words)
    return task, step


def test_answers_multiple_choice_with_option_text_and_shows_operation(answered):
    task, step = _step_for(answered, "rapidocr", "highest score")
    assert step.answer in task.choices
    assert "max of" in step.evidence and "table:" in step.evidence


def test_exact_money_arithmetic_with_mixed_fraction_quantity(answered):
    task, step = _step_for(answered, "rapidocr", "3+1/2 pounds")
    assert step.answer == "10.50", step.evidence


def test_stem_and_leaf_plot_is_unrolled_into_values(answered):
    task, step = _step_for(answered, "rapidocr", "exactly 64")
    assert "stem-and-leaf values" in step.evidence and step.answer == task.answer


def test_blank_image_gives_no_answer(registry, tmp_path):
    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 120), "white").save(blank)
    step = registry.run(Invoke("tesseract", "table-qa"), question="What is the mean of the numbers?",
                        images=[str(blank)])
    assert step.error is None and step.answer is None


def test_missing_image_is_an_input_error(registry):
    step = registry.run(Invoke("tesseract", "table-qa"), question="What is the mean of the numbers?", images=[])
    assert step.answer is None and step.error_kind == "input"


def test_a_cleaned_table_image_is_reused_as_a_private_copy(monkeypatch):
    """Both table-qa pairs clean the same image before their second reading: the second gets the kept result, the
    same pixels as cleaning anew, and a copy it may draw on."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "skills" / "table-qa"))
    cleaning = importlib.import_module("tablelib.image")
    image = _price_list()
    first = cleaning.clean_for_ocr(image, 3)
    ImageDraw.Draw(first).rectangle((0, 0, 60, 60), fill="black")
    second = cleaning.clean_for_ocr(image, 3)
    assert second.mode == "RGB" and second.tobytes() == cleaning._clean(image, 3).convert("RGB").tobytes()
    assert second.tobytes() != first.tobytes()
    assert cleaning.clean_for_ocr(image, 2).size == (image.width * 2, image.height * 2)  # the scale is in the key
