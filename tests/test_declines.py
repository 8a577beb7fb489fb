"""Skills that decline a question from its text (`declines` in SKILL.md): their pairs leave the action space, no
policy spends a turn on a call bound to return nothing, and where every pair left declines the episode stops without
a call (knowing when nothing fits). Real skills, real experts, the real graph."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from maestro_graph.choices import inline_choices
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.errors import SkillError
from maestro_graph.policy import ActionSpace, EpisodeView, make_policy
from maestro_graph.registry import Registry, load_skill
from maestro_graph.types import Invoke, StopReason

SKILLS = Path(__file__).resolve().parents[1] / "skills"
CIRCLES = str(Path(__file__).resolve().parents[1] / "examples" / "circles.png")
CV_AND_MATH = """\
skill_dirs: [{skills}]
skills: [counting, arithmetic, shapes, calculator]
models:
  - name: opencv-vision
    description: Classical OpenCV image analyser.
    capabilities: [vision-cv]
    backend: {{type: python, entry: "maestro_graph.experts.opencv_vision:OpenCVVisionExpert"}}
  - name: sympy
    description: SymPy computer algebra.
    capabilities: [math]
    backend: {{type: python, entry: "maestro_graph.experts.sympy_math:SympyMathExpert"}}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Registry:
    path = tmp_path_factory.mktemp("declines") / "registry.yaml"
    path.write_text(CV_AND_MATH.format(skills=SKILLS))
    return Registry.load(path, cache=None)


def _space(registry: Registry, question: str, choices=None) -> ActionSpace:
    return ActionSpace.build(registry, EpisodeView(question, (CIRCLES,), choices, (), 4, 10.0))


@pytest.mark.parametrize(("question", "callable_skills"), [
    ("How many circles are in the image?", {"counting"}),
    ("Tom has 3 apples and buys 5 more. How many apples does he have?", {"arithmetic"}),  # apples: no shape
    ("What is the title of this chart?", set()),
    ("Between 2010 and 2015, which year had the highest revenue?", set()),  # two numbers, no operation to do
])
def test_pairs_whose_skill_declines_the_question_leave_the_action_space(small, question, callable_skills):
    space = _space(small, question)
    assert {p.skill.name for p in space.pairs} == callable_skills
    assert {skill for skill, _ in space.declined} == {"counting", "arithmetic"} - callable_skills


def test_barcode_reading_declines_questions_about_other_things(registry):
    asked = {p.id for p in _space(registry, "Is there a dog in the picture?").pairs}
    assert not {"zxing@@barcode-reading", "opencv-barcode@@barcode-reading"} & asked
    asked = {p.id for p in _space(registry, "Which year had the highest revenue?").pairs}
    assert not {"zxing@@barcode-reading", "opencv-barcode@@barcode-reading"} & asked
    for question in ("Is there a QR code in the picture?", "What does it say when scanned?", "Decode the image."):
        asked = {p.id for p in _space(registry, question).pairs}
        assert {"zxing@@barcode-reading", "opencv-barcode@@barcode-reading"} <= asked, question


@pytest.mark.parametrize(("question", "choices", "declined"), [
    ("Find the volume of the cone shown. Round your answer to two decimal places.", None, True),
    ("Find x. A. 30°; B. 45°; C. 60°; D. 90°", None, False),  # options written in the question
    ("As shown in the figure, AB is parallel to CD, angle 1 = 50°, find angle 2.", ["40°", "50°", "130°"], False),
    ("Which of the following options is a reasonable estimate of the angle ABC?", None, False),  # a measurement
    ("", None, False),  # the question is in the image: read before anything is declined
])
def test_visual_math_declines_free_form_computations_from_the_text(registry, question, choices, declined):
    reasons = dict(_space(registry, question, choices or inline_choices(question)).declined)  # as the graph's intake
    assert ("visual-math" in reasons) == declined, reasons


def test_a_skill_declines_through_the_same_check_when_called_anyway(small):
    """A policy that names a declined pair (an LM router, a fixed pair) gets the same reason as a step."""
    question = "What is the title of this chart?"
    reasons = dict(_space(small, question).declined)
    step = small.run(Invoke("opencv-vision", "counting"), question=question, images=[CIRCLES])
    assert step.answer is None and step.evidence == reasons["counting"]


def test_where_every_pair_declines_the_episode_stops_without_a_call(small):
    graph = build_graph(small, make_policy("neural"))
    out = run_episode(graph, "Is the chart's title in bold?", [CIRCLES], ["Yes", "No"])
    assert out.steps == [] and out.stop == StopReason.OUT_OF_REACH
    assert "counting:" in out.stop_reason and "arithmetic:" in out.stop_reason
    assert out.answer in {"Yes", "No"} and out.answer_source == "guess"  # a yes/no question still gets an answer
    counted = run_episode(graph, "How many circles are in the image?", [CIRCLES])
    assert [s.pair for s in counted.steps] == ["opencv-vision@@counting"] and counted.answer is not None


def _skill(root: Path, declines: str, code: str) -> Path:
    folder = root / "picky"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\n" + textwrap.dedent(f"""\
        name: picky
        description: A test skill.
        metadata:
          tier: "1"
          requires: "ocr"
          entry: "skill.py:run"
          declines: {declines}
        """) + "---\nInstructions.\n")
    (folder / "skill.py").write_text(code)
    return folder


def test_a_bad_declines_key_is_named_and_a_failing_check_keeps_the_skill_callable(tmp_path):
    with pytest.raises(SkillError) as info:
        load_skill(_skill(tmp_path / "a", '"not a name!"', "def run(ctx):\n    return None\n"))
    assert info.value.field == "metadata.declines" and "picky" in str(info.value.file)
    broken = load_skill(_skill(tmp_path / "b", '"declines"', "def run(ctx):\n    return None\n"
                                                          "def declines(request, choices):\n    return 1 / 0\n"))
    with pytest.warns(UserWarning, match="picky.*ZeroDivisionError.*stays callable"):
        assert broken.declines("anything", None) is None
    missing = load_skill(_skill(tmp_path / "c", '"declines"', "def run(ctx):\n    return None\n"))
    with pytest.warns(UserWarning, match="has no function 'declines'"):
        assert missing.declines("anything", None) is None
