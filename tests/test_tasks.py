"""Task files: every bad line is reported with its line number and reason; good lines still load. A task's chance
level."""

import json

from maestro_graph.core.tasks import Task, load_tasks


def test_bad_lines_are_reported_and_skipped(tmp_path):
    (tmp_path / "img.png").write_bytes(b"\x89PNG not really")  # existence is checked here; decoding later
    lines = [
        json.dumps({"id": "ok", "question": "q?", "images": ["img.png"], "answer": 5, "answer_type": "number"}),
        "{not json",
        json.dumps({"id": "missing", "question": "q?", "images": ["nope.png"]}),
        json.dumps({"id": "badtype", "question": "q?", "answer_type": "float"}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "ok", "question": "again"}),
        "",
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines))
    tasks, problems = load_tasks(path)
    assert [t.id for t in tasks] == ["ok"]
    assert tasks[0].answer == "5" and tasks[0].images == [str((tmp_path / "img.png").resolve())]
    assert [(p.line, p.id) for p in problems] == [(2, None), (3, "missing"), (4, "badtype"), (5, None), (6, "ok")]
    assert "malformed JSON" in problems[0].error
    assert "missing image" in problems[1].error
    assert "answer_type" in problems[2].error
    assert "duplicate id" in problems[4].error


def test_chance_is_a_uniform_guess_over_the_items_options_or_yes_no():
    assert Task(id="a", question="Which? A. x B. y C. z D. w", answer="x", answer_type="choice").chance == 0.25
    assert Task(id="b", question="Which?", choices=["x", "y"], answer="x", answer_type="choice").chance == 0.5
    assert Task(id="c", question="Is it red?", answer="yes", answer_type="yesno").chance == 0.5
    assert Task(id="d", question="What is written?", answer="STOP").chance == 0.0
