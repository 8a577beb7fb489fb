"""Task and prediction files that are bad in byte-level ways (invalid UTF-8, a byte-order mark, a prediction cut
inside a multi-byte character) and unreadable images: `maestro predict` and `--resume` go on, record each bad line,
and count episodes whose input failed as failed."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

from typer.testing import CliRunner

from maestro_graph.core.question_text import MAX_QUESTION_CHARS
from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.episode.runner import predict
from maestro_graph.training.evaluation.evaluate import run_policy

ROOT = Path(__file__).resolve().parents[1]
QR = ROOT / "examples" / "qrcode.png"
QR_Q = "What text does the QR code encode?"


def _line(**task) -> bytes:
    return json.dumps(task, ensure_ascii=False).encode() + b"\n"


def _qr_tasks(folder: Path, *extra: bytes, bom: bool = False) -> Path:
    """Two good QR items ("q", "é") around `extra` raw lines."""
    (folder / "qr.png").write_bytes(QR.read_bytes())
    path = folder / "tasks.jsonl"
    path.write_bytes((codecs.BOM_UTF8 if bom else b"")
                     + _line(id="q", question=QR_Q, images=["qr.png"], answer="Wikipedia", source="s")
                     + b"".join(extra)
                     + _line(id="é", question=QR_Q + " ¿Qué?", images=["qr.png"], answer="Wikipedia", source="s"))
    return path


def test_a_line_that_is_not_utf8_is_one_bad_line(tmp_path):
    latin1 = json.dumps({"id": "latin", "question": "Qu\xe9?"}, ensure_ascii=False).encode("latin-1") + b"\n"
    tasks, problems = load_tasks(_qr_tasks(tmp_path, latin1, b"\xff\xfe\x00garbage\n"))
    assert [t.id for t in tasks] == ["q", "é"]
    assert [(p.line, p.id) for p in problems] == [(2, None), (3, None)]
    assert problems[0].error == "not valid UTF-8 (invalid continuation byte at byte 32 of the line)"
    assert problems[1].error.startswith("not valid UTF-8 (invalid start byte at byte 1")


def test_a_byte_order_mark_is_not_part_of_line_one(tmp_path):
    tasks, problems = load_tasks(_qr_tasks(tmp_path, bom=True))
    assert [t.id for t in tasks] == ["q", "é"] and problems == []
    inner = tmp_path / "inner.jsonl"  # a mark anywhere else is an error of that line, as any stray character
    inner.write_bytes(_line(id="a", question="q?") + codecs.BOM_UTF8 + _line(id="b", question="q?"))
    tasks, problems = load_tasks(inner)
    assert [t.id for t in tasks] == ["a"] and [p.line for p in problems] == [2]


def test_predict_and_resume_go_on_past_an_invalid_line(tmp_path, registry):
    tasks = _qr_tasks(tmp_path, b'{"id": "bad", "question": "\xc3("}\n', bom=True)
    out = tmp_path / "pred.jsonl"
    summary = predict(registry, tasks, out, policy="rules", progress=False)
    assert [(p.line, p.error[:19]) for p in summary.skipped] == [(2, "not valid UTF-8 (in")]
    assert [json.loads(x)["id"] for x in out.read_text(encoding="utf-8").splitlines()] == ["q", "é"]
    assert summary.accuracy() == {"s": 1.0} and summary.failed == 0
    again = predict(registry, tasks, out, policy="rules", progress=False, resume=True)
    assert len(again.skipped) == 1 and again.accuracy() == {"s": 1.0}


def test_resume_drops_a_last_line_cut_inside_a_character(tmp_path, registry):
    tasks = _qr_tasks(tmp_path)
    out = tmp_path / "pred.jsonl"
    predict(registry, tasks, out, policy="rules", progress=False)
    first, second = out.read_bytes().splitlines()
    marked = json.dumps({**json.loads(first), "latency_s": -1.0}).encode()  # proves the kept record is kept
    cut = second.index("é".encode()) + 1  # the id "é" is two bytes: stop after the first one
    out.write_bytes(marked + b"\n" + second[:cut])
    summary = predict(registry, tasks, out, policy="rules", progress=False, resume=True)
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["q", "é"] and records[0]["latency_s"] == -1.0
    assert records[1]["latency_s"] >= 0 and summary.accuracy() == {"s": 1.0}


def _broken_tasks(folder: Path) -> Path:
    (folder / "empty.png").write_bytes(b"")
    (folder / "truncated.png").write_bytes(QR.read_bytes()[:200])
    return _qr_tasks(folder, _line(id="empty", question=QR_Q, images=["empty.png"], answer="Wikipedia", source="s"),
                     _line(id="truncated", question=QR_Q, images=["truncated.png"], answer="Wikipedia", source="s"),
                     _line(id="long", question="x" * (MAX_QUESTION_CHARS + 1), images=["qr.png"], answer="x",
                           source="s"))


def test_episodes_whose_input_failed_are_counted_as_failed(tmp_path, registry):
    out = tmp_path / "pred.jsonl"
    summary = predict(registry, _broken_tasks(tmp_path), out, policy="rules", progress=False)
    records = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert {i: r["failed"] for i, r in records.items()} == {"q": False, "empty": True, "truncated": True,
                                                            "long": True, "é": False}
    assert "empty (0 bytes)" in records["empty"]["steps"][0]["error"] and "score" in records["empty"]
    assert records["long"]["stop_reason"].startswith("input error") and not records["long"]["steps"]
    assert summary.failed == 3 and summary.total == 5
    resumed = predict(registry, _broken_tasks(tmp_path), out, policy="rules", progress=False, resume=True)
    assert resumed.failed == 3  # the kept records count too


def test_the_cli_summary_and_eval_metrics_count_input_failures(tmp_path, registry):
    tasks = _broken_tasks(tmp_path)
    result = CliRunner().invoke(app, ["predict", "--tasks", str(tasks), "--out", str(tmp_path / "p.jsonl"),
                                      "--policy", "rules", "--no-cache"])
    assert result.exit_code == 1, result.output  # some episodes failed (PredictExit.FAILED)
    assert "5 items, 3 failed, 0 skipped" in " ".join(result.output.split())
    items, _ = load_tasks(tasks)
    assert run_policy(registry, items, "rules").metrics()["failures"] == 3
