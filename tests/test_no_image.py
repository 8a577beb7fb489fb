"""A request without an image offers no pair whose skill needs one, for every policy, and a text
question reaches the text skills first."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import REAL
from typer.testing import CliRunner

from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode, run_tasks
from maestro_graph.features.embeddings import EMBED_DIM
from maestro_graph.features.state import question_features
from maestro_graph.policy import ActionSpace, EpisodeView, make_policy
from maestro_graph.registry.outcomes import PairOutcomes
from maestro_graph.types import ErrorKind, StopReason

POLICIES = ("neural", "rules", "random", "fixed:rapidocr@@chart-qa", "best-single", "knn", "classifier", "oracle")


@pytest.fixture(scope="module")
def text_only(registry):
    """The packaged registry without its chat model (a call takes seconds), the real items without images, and a
    word problem (no real item without its image is one the arithmetic skill takes)."""
    tasks = [t.model_copy(update={"images": []}) for area in sorted(REAL.iterdir()) if area.is_dir()
             for t in load_tasks(area / "tasks.jsonl")[0]]
    word_problem = tasks[0].model_copy(update={
        "id": "word-problem", "question": "Tom has 3 apples and buys 5 more. How many apples does he have now?",
        "choices": None, "answer": "8", "answer_type": "number"})
    return registry.without(models={"smollm2"}), [*tasks, word_problem]


def _image_favouring_outcomes(registry, tasks) -> PairOutcomes:
    """Training outcomes in which every image pair is right and every text pair wrong: the trained routers would
    call an image pair first if the action space offered one."""
    pairs = [p.id for p in registry.pairs()]
    right = np.array([[float(p.skill.needs_image) for p in registry.pairs()]] * len(tasks))
    return PairOutcomes(task_ids=[t.id for t in tasks], questions=[t.question for t in tasks],
                        images=[["examples/circles.png"] for _ in tasks], choices=[t.choices for t in tasks],
                        sources=["s"] * len(tasks), pairs=pairs, scores=right, costs=np.zeros_like(right))


@pytest.mark.slow
def test_no_policy_calls_an_image_pair_on_the_real_items_without_their_images(text_only):
    registry, tasks = text_only
    outcomes = _image_favouring_outcomes(registry, tasks)
    needs = {s.name: s.needs_image for s in registry.tier1}
    called = {}
    for policy in POLICIES:
        for task, result in run_tasks(registry, tasks, policy, outcomes=outcomes,
                                      context=MaestroContext(max_turns=4)):
            assert result.error is None, (policy, task.id, result.error)
            for step in result.steps:
                if needs[step.skill]:  # named by a policy that ignores the space: refused, never run
                    assert step.error_kind == ErrorKind.POLICY and not step.calls, (policy, task.id, step)
                else:
                    called[step.pair] = called.get(step.pair, 0) + 1
    assert set(called) == {"sympy@@arithmetic"}, called  # the word problem still reaches its skill


def test_without_an_image_the_space_holds_text_pairs_and_the_features_say_so(registry):
    view = EpisodeView("What is the capital of France?", (), None, (), 4, 10.0)
    space = ActionSpace.build(registry, view)
    assert {p.skill.name for p in space.pairs} == {"general-qa"} and not space.needs_image
    with_image = ActionSpace.build(registry, replace(view, images=("examples/circles.png",)))
    assert {p.skill.needs_image for p in with_image.pairs} == {True, False}
    touching = ActionSpace.build(registry, replace(view, question="Do any two of the circles touch?"))
    assert touching.pairs == () and touching.needs_image == ("counting",)
    # the neural policy reads the state through question_features, whose first image descriptor is "has an image"
    features = question_features([view.question] * 2, [[], ["examples/circles.png"]])
    assert features[:, EMBED_DIM].tolist() == [0.0, 1.0]


def test_a_written_calculation_is_answered_by_the_arithmetic_skill_in_one_call():
    """`maestro ask "What is 17 * 23?"` used to call four image skills in turn and end without an answer."""
    result = CliRunner().invoke(app, ["ask", "What is 17 * 23?", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["answer"] == "391" and [s["skill"] for s in data["steps"]] == ["arithmetic"]


def test_a_question_only_an_image_answers_ends_with_an_input_error_naming_the_missing_image(registry):
    graph = build_graph(registry, make_policy("neural"))
    result = run_episode(graph, "Are there more than 5 circles?", [])
    assert result.stop == StopReason.INPUT_ERROR and result.answer is None and not result.steps
    assert "no image" in result.stop_reason and "counting" in result.stop_reason
