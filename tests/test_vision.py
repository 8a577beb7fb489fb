"""The classical vision expert (opencv-vision) and the counting skill on real VLMs-are-Blind figures.

Each expert method is checked on the real figure that exercises it hardest (gray overlapping pentagons, a 20 px square
nested in four others, tangent discs); the skill is checked end to end through the registry on the whole sample.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from maestro_graph.experts.opencv_vision import OpenCVVisionExpert, color_name
from maestro_graph.experts.protocols import shape_kind
from maestro_graph.scoring import score
from maestro_graph.types import Invoke
from tests.conftest import REAL, real_tasks

IMAGES = REAL / "vision" / "images"
PAIR = Invoke("opencv-vision", "counting")


@pytest.fixture(scope="module")
def expert() -> OpenCVVisionExpert:
    return OpenCVVisionExpert()


def _image(name: str) -> Image.Image:
    return Image.open(IMAGES / f"{name}.png").convert("RGB")


def _image_ref(name: str) -> str:
    return str(IMAGES / f"{name}.png")


def test_expert_is_available():
    assert OpenCVVisionExpert.unavailable_reason() is None


def test_colored_overlapping_rings_are_counted_with_their_colours(expert):
    circles = expert.circles(_image("5d2ceab42ed0d5d8"))
    assert len(circles) == 7
    assert all(c.support >= 0.9 and not c.filled for c in circles)
    assert len({c.color for c in circles}) >= 5  # the rings are drawn in different colours
    radii = [c.r for c in circles]
    assert max(radii) - min(radii) < 2  # sub-pixel fits: the rings are equal


def test_colour_filter_keeps_only_that_colour(expert):
    blue = expert.circles(_image("5d2ceab42ed0d5d8"), color="blue")
    assert len(blue) == 1 and blue[0].color == "blue"


def test_gray_overlapping_pentagons(expert):
    pentagons = expert.polygons(_image("cb3062f416c5dbd4"), 5)
    assert len(pentagons) == 6
    assert all(p.sides == 5 and 15 < p.side < 25 and p.color == "gray" for p in pentagons)


def test_nested_squares_down_to_a_tiny_one(expert):
    squares = expert.polygons(_image("af3601a75c698e45"), 4)
    assert len(squares) == 5
    sizes = sorted(s.side for s in squares)
    assert sizes[0] < 25 and sizes[-1] > 200


def test_polygon_needs_three_sides(expert):
    with pytest.raises(ValueError, match="at least 3 sides"):
        expert.polygons(_image("af3601a75c698e45"), 2)


def test_line_crossings_by_colour(expert):
    image = _image("29585b1cc3e8cdab")
    assert {c.name for c in expert.colors(image)[:2]} == {"red", "blue"}
    assert len(expert.line_crossings(image, "blue", "red")) == 2
    assert len(expert.line_crossings(_image("e48e553bb07abda1"), "red", "blue")) == 0
    assert expert.line_crossings(image, "blue", "green") == []  # no green line: nothing crosses it


def test_grid_rows_and_columns_ignore_cell_text(expert):
    grid = expert.grid(_image("f065f856e15d4d07"))  # 8x8 table with a word in every cell
    assert (grid.rows, grid.columns) == (8, 8)
    blank = expert.grid(Image.new("RGB", (200, 200), "white"))
    assert (blank.rows, blank.columns) == (0, 0)


def test_tangent_discs_touch_but_do_not_overlap(expert):
    tangent = expert.circle_pairs(_image("9dc29651852ee17b"))[0]
    assert tangent.touching and not tangent.overlapping and abs(tangent.gap) < 1.5
    apart = expert.circle_pairs(_image("0a39a85fe9ad74f8"))[0]
    assert not apart.touching and apart.gap > 4
    assert {apart.first.color, apart.second.color} == {"blue", "magenta"}
    assert apart.first.filled and apart.second.filled


def test_vocabulary_helpers():
    assert color_name((0, 0, 255)) == "blue" and color_name((128, 128, 128)) == "gray"
    assert shape_kind("Pentagons") == "pentagon" and shape_kind("rings") == "circle" and shape_kind("cats") is None


def test_counting_skill_on_the_real_sample(registry):
    tasks = real_tasks("vision")
    right = 0
    for task in tasks:
        step = registry.run(PAIR, question=task.question, images=task.images, choices=task.choices)
        assert step.error is None, step.error
        right += score(step.answer, task.answer, task.answer_type, tolerance=task.tolerance, choices=task.choices)
    assert right >= 11, f"{right}/{len(tasks)}"


def test_answers_take_the_form_the_question_asks(registry):
    lines = _image_ref("29585b1cc3e8cdab")
    braces = registry.run(PAIR, question="How many times do the blue and red lines touch each other? Answer with a "
                                         "number in curly brackets, e.g., {5}.", images=[lines])
    assert braces.answer == "{2}"
    plain = registry.run(PAIR, question="How many times do the red and blue lines intersect?", images=[lines])
    assert plain.answer == "2"
    grid = _image_ref("3e5426274ce5e9f5")  # 8 rows, 7 columns
    assert registry.run(PAIR, question="How many columns and rows does the grid have?", images=[grid]).answer == "(7,8)"
    assert registry.run(PAIR, question="How many rows are in the table?", images=[grid]).answer == "8"
    choice = registry.run(PAIR, question="How many squares are in the image?", images=[_image_ref("a51ea16419eb961f")],
                          choices=["1", "2", "3"])
    assert choice.answer == "2"


def test_unknown_request_is_no_answer_and_bad_image_is_an_input_error(registry, tmp_path: Path):
    unknown = registry.run(PAIR, question="What is written on the sign?", images=[_image_ref("29585b1cc3e8cdab")])
    assert unknown.answer is None and unknown.error is None and "no count" in unknown.evidence
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    failed = registry.run(PAIR, question="How many circles are there?", images=[str(broken)])
    assert failed.error_kind == "input"
