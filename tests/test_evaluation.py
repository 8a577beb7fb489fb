"""`maestro eval`: all policies on the same items in one run, report files, concurrency equal to serial."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from maestro_graph.core.tasks import load_tasks
from maestro_graph.doors.cli import app
from maestro_graph.episode.runner import run_tasks
from maestro_graph.registry import Registry
from maestro_graph.registry.outcomes import PairOutcomes

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A registry without the LM (fast), and small train/eval task files built from the bundled examples."""
    tmp = tmp_path_factory.mktemp("eval")
    config = yaml.safe_load((ROOT / "maestro_graph" / "default_registry.yaml").read_text())
    config["models"] = [m for m in config["models"] if m["name"] != "smollm2"]
    config["skill_dirs"] = [str(ROOT / "skills")]
    config["profile"] = str(ROOT / "maestro_graph" / config["profile"])  # the shipped profile, by absolute path
    (tmp / "registry.yaml").write_text(yaml.safe_dump(config))
    shutil.copy(ROOT / "examples" / "circles.png", tmp / "circles.png")
    shutil.copy(ROOT / "examples" / "qrcode.png", tmp / "qr.png")
    rows = [("How many circles are in the image?", "circles.png", "7", "number", "shapes"),
            ("What is the value encoded in this code?", "qr.png", "Wikipedia", "text", "codes"),
            ("Count the circles in the picture.", "circles.png", "7", "number", "shapes"),
            ("Decode the QR code.", "qr.png", "Wikipedia", "text", "codes")]

    def write(name, subset):
        lines = [json.dumps({"id": f"{name}{i}", "question": q, "images": [img], "answer": a, "answer_type": t,
                             "source": s, "domain": s}) for i, (q, img, a, t, s) in enumerate(subset)]
        (tmp / f"{name}.jsonl").write_text("\n".join(lines) + "\n")

    write("train", rows[:2])
    write("test", rows[2:])
    return tmp


def test_eval_writes_report_for_every_policy(files):
    out = files / "report"
    policies = ["rules", "random", "fixed:opencv-vision@@counting", "best-single", "knn", "classifier", "oracle"]
    args = ["eval", "--tasks", str(files / "test.jsonl"), "--train-tasks", str(files / "train.jsonl"),
            "--out", str(out), "--registry", str(files / "registry.yaml"), "--cache-dir", str(files / "cache")]
    for p in policies:
        args += ["--policy", p]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert list(data["policies"]) == policies
    oracle = data["policies"]["oracle"]
    assert oracle["accuracy"] == 1.0 and set(oracle["accuracy_by_source"]) == {"shapes", "codes"}
    for name, metrics in data["policies"].items():
        assert {"macro_accuracy", "accuracy_by_domain", "mean_cost", "latency_p50_s", "latency_p95_s",
                "calls_per_episode", "pair_share", "failures", "cache_hits"} <= set(metrics), name
    assert data["policies"]["fixed:opencv-vision@@counting"]["accuracy_by_source"] == {"codes": 0.0, "shapes": 1.0}
    # every policy that decided has its decision latency (the oracle is asked too; a fixed pair decides in ~0 ms)
    assert all(m["decision_p50_ms"] > 0 for m in data["policies"].values())
    assert data["best_single_pair"] in {"opencv-vision@@counting", "zxing@@barcode-reading",
                                        "opencv-barcode@@barcode-reading"}
    report = (out / "report.md").read_text()
    assert "| oracle |" in report and "## Accuracy per source" in report
    assert (out / "accuracy_by_source.png").is_file() and (out / "accuracy_vs_cost.png").is_file()
    # how sure the answers were: every answer's confidence, the ECE over 10 bins and the reliability diagram
    rules = data["policies"]["rules"]
    records = [json.loads(line) for line in (out / "predictions" / "rules.jsonl").read_text().splitlines()]
    answered = [r for r in records if r["answer"] is not None]
    assert answered and all(0 < r["confidence"] < 1 and r["confidence_basis"] for r in answered)
    assert rules["confidence_items"] == len(answered) and len(rules["reliability"]) == 10
    bins: dict[int, list[dict]] = {}
    for r in answered:
        bins.setdefault(min(int(r["confidence"] * 10), 9), []).append(r)
    gaps = [abs(sum(r["confidence"] - r["score"] for r in rows)) for rows in bins.values()]
    assert rules["ece"] == pytest.approx(sum(gaps) / len(answered))
    assert "## How sure the answers were (expected calibration error, 10 bins)" in report
    assert f"| rules | {len(answered)} | {rules['ece']:.3f} |" in report and (out / "reliability.png").is_file()
    assert (out / "routing_knn.png").is_file() and not (out / "routing_fixed_opencv-vision__counting.png").exists()
    counters = (out / "predictions" / "oracle.metrics.prom").read_text()  # as `maestro predict` writes them
    episodes = sum(float(line.split()[-1]) for line in counters.splitlines()
                   if line.startswith("maestro_episodes_total"))
    assert episodes == len(oracle_records := (out / "predictions" / "oracle.jsonl").read_text().splitlines())
    assert oracle_records and "maestro_expert_calls_total" in counters
    assert len((out / "predictions" / "knn.jsonl").read_text().splitlines()) == 2
    trained_on = PairOutcomes.load(out / "train_outcomes.json")
    assert trained_on.scores.shape == (2, len(trained_on.pairs))
    assert trained_on.best_single() == data["best_single_pair"]
    assert "## Every pair on the training items" in report
    assert {r.source for r in trained_on.by_source()} <= {"shapes", "codes"}
    assert all(r.oracle_accuracy >= r.best_accuracy for r in trained_on.by_source())


def test_eval_reports_calls_where_no_pair_answers_and_unanswered_choice_items(files):
    """The oracle's misses are the items no pair answers: each policy's calls there are reported; an item with
    options written in the question never ends without an answer (the graph's fallback guesses an option)."""
    rows = [{"id": "p1", "question": "Which painter made this picture?", "images": ["circles.png"],
             "answer": "Kandinsky", "source": "art"},
            {"id": "p2", "question": "Which painter made this picture? A. Klee B. Kandinsky C. Miro",
             "images": ["circles.png"], "answer": "B", "source": "art"},
            {"id": "c1", "question": "How many circles are in the image?", "images": ["circles.png"], "answer": "7",
             "answer_type": "number", "source": "shapes"}]
    (files / "art.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = files / "art-report"
    result = CliRunner().invoke(app, ["eval", "--tasks", str(files / "art.jsonl"), "--out", str(out), "--registry",
                                      str(files / "registry.yaml"), "--cache-dir", str(files / "cache"),
                                      "-p", "rules", "-p", "oracle"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    oracle = {r["id"]: r for r in map(json.loads, (out / "predictions" / "oracle.jsonl").read_text().splitlines())}
    assert not oracle["p1"]["step_right"] and oracle["c1"]["step_right"]  # no pair knows the painter; one counts
    no_pair = data["no_pair_items"]
    assert no_pair["items"] == sum(not r["step_right"] for r in oracle.values())
    assert set(no_pair["calls_per_episode"]) == {"rules", "oracle"} and no_pair["calls_per_episode"]["oracle"] > 1
    for metrics in data["policies"].values():
        assert (metrics["closed_items"], metrics["no_answer_closed"]) == (1, 0)
    assert f"## Items no pair answers ({no_pair['items']}" in (out / "report.md").read_text()


def test_training_file_cannot_be_an_evaluated_file(files):
    result = CliRunner().invoke(app, ["eval", "--tasks", str(files / "train.jsonl"), "--train-tasks",
                                      str(files / "test.jsonl"), "--train-tasks", str(files / "train.jsonl"),
                                      "--policy", "knn", "--out", str(files / "x"),
                                      "--registry", str(files / "registry.yaml"), "--no-cache"])
    assert result.exit_code == 2 and "leak" in result.output


def test_routers_fitted_on_selected_items_refuse_an_evaluated_one(files):
    """An experiment fits knn on a selection of items (leave-one-source-out's other sources) instead of a file: an
    item that is also evaluated is refused before anything runs."""
    from maestro_graph.training.evaluation.evaluate import evaluate

    registry = Registry.load(files / "registry.yaml")
    evaluated, _ = load_tasks(files / "test.jsonl")
    with pytest.raises(ValueError, match="leak"):
        evaluate(registry, [files / "test.jsonl"], ["knn"], train_items=evaluated[:1])


def test_unknown_policy_lists_valid_ones(files):
    result = CliRunner().invoke(app, ["eval", "--tasks", str(files / "test.jsonl"), "--policy", "smart",
                                      "--out", str(files / "y")])
    assert result.exit_code == 2 and "valid: neural" in " ".join(result.output.split())


def test_concurrent_run_equals_serial(files):
    registry = Registry.load(files / "registry.yaml")
    tasks, _ = load_tasks(files / "test.jsonl")
    tasks = tasks * 2
    serial = [(r.answer, [s.pair for s in r.steps]) for _, r in run_tasks(registry, tasks, "random", workers=1)]
    parallel = [(r.answer, [s.pair for s in r.steps]) for _, r in run_tasks(registry, tasks, "random", workers=4)]
    assert serial == parallel


def test_an_interrupted_eval_keeps_the_finished_episodes(files, tmp_path):
    """Ctrl-C in the middle of a run: the records written so far stay, one valid JSON line per finished episode."""
    rows = (files / "test.jsonl").read_text().splitlines()
    many = files / "many.jsonl"  # beside the images: task files may only reach images under their own folder
    many.write_text("\n".join(json.dumps({**json.loads(rows[i % 2]), "id": f"m{i}"}) for i in range(40)) + "\n")
    out = tmp_path / "out"
    # a job started in the background inherits SIGINT ignored, and Python then keeps it ignored: the child restores
    # the handler a terminal's Ctrl-C meets
    child = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "from maestro_graph.doors.cli import app; app()")
    proc = subprocess.Popen(
        [sys.executable, "-c", child, "eval", "--tasks", str(many), "-p", "random",
         "--out", str(out), "--registry", str(files / "registry.yaml"), "--no-cache", "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    written = out / "predictions" / "random.jsonl"
    deadline = time.monotonic() + 120
    while not (written.is_file() and len(written.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in stderr, stderr[-2000:]
    kept = [json.loads(line) for line in written.read_text().splitlines()]
    assert 2 <= len(kept) < 40 and all({"id", "answer", "steps", "score"} <= r.keys() for r in kept)
    assert not (out / "results.json").exists()


def test_a_long_policy_name_gets_a_short_distinct_file_stem():
    from maestro_graph.training.evaluation.evaluate import MAX_STEM, file_stem

    assert file_stem("fixed:rapidocr@@chart-qa") == "fixed_rapidocr__chart-qa"
    paths = [f"runs/an/experiment/with/a/long/name/source:chartbench/seed{i}/train/policy.safetensors"
             for i in range(4)]
    one, two = "neural:" + "+".join(paths), "neural:" + "+".join(paths[::-1])
    assert len(file_stem(one)) == MAX_STEM and file_stem(one) != file_stem(two)


def _bins(*filled: tuple[int, float, float]) -> list[dict]:
    """A 10-bin reliability list with the given (bin, mean confidence, accuracy) bins holding 5, 12, ... answers."""
    bins = [{"count": 0, "confidence": 0.0, "accuracy": 0.0} for _ in range(10)]
    for k, (i, confidence, accuracy) in enumerate(filled):
        bins[i] = {"count": 5 + 7 * k, "confidence": confidence, "accuracy": accuracy}
    return bins


def test_the_report_figures_show_every_policy_and_overlap_no_label():
    """Two policies with the same reliability bins hid each other, with no bin counts, and policies of equal cost
    and accuracy wrote their names over each other: each policy now has its own marker, equal points are drawn
    apart, every bin's count is written, and no label overlaps another label, a point or the axes' edge."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from maestro_graph.training.evaluation.figures import cost_figure, reliability_figure, text_box

    same = _bins((8, 0.85, 1.0), (9, 0.95, 1.0), (5, 0.55, 0.4))
    metrics = {name: {"reliability": same, "ece": 0.05, "mean_cost": cost, "macro_accuracy": accuracy}
               for name, cost, accuracy in [("neural", 0.1, 0.94), ("rules", 0.1, 0.94),
                                            ("lm:shipped#choice", 0.1, 0.93), ("random", 0.9, 0.2)]}
    for figure, expected in ((reliability_figure, ["5", "12", "19"] * 4), (cost_figure, list(metrics))):
        fig = figure(plt, metrics)
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        labels = [t for t in ax.texts]
        assert sorted(t.get_text() for t in labels) == sorted(expected)
        boxes = [text_box(t, renderer) for t in labels]
        assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
        inside = ax.get_window_extent(renderer)
        assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 and b.y1 <= inside.y1 for b in boxes)
        plt.close(fig)
    fig = reliability_figure(plt, metrics)
    lines = [line for line in fig.axes[0].get_lines() if line.get_label() != "calibrated"]
    assert len({line.get_marker() for line in lines}) == len(lines) == 4
    assert len({tuple(line.get_xdata()) for line in lines}) == 4  # equal bins drawn side by side, none hidden
    plt.close(fig)
