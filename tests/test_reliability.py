"""Expert faults (retries, backoff, circuit breaker, result checks, fault injection), skill containment, resuming an
interrupted prediction run, and the bad-input suite; a short run of the whole `maestro reliability` command is in
tests/test_packaging.py, through the installed wheel. Real experts (zxing on the example QR code) behind the
fault-injection wrapper; the crashing fake stands in for a deterministic crash."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from maestro_graph.episode.runner import predict
from maestro_graph.errors import ConfigError, ExpertFailure, ExpertRejected
from maestro_graph.operations.reliability.suite import bad_input_suite, bad_skill_registry, fault_registry
from maestro_graph.registry import Registry
from maestro_graph.registry.handles import MAX_RESULT_ITEMS, Ledger
from maestro_graph.types import Invoke

ROOT = Path(__file__).resolve().parents[1]
QR = str(ROOT / "examples" / "qrcode.png")
CIRCLES = str(ROOT / "examples" / "circles.png")
QR_Q = "What text does the QR code encode?"


def _registry(tmp_path: Path, **card) -> Registry:
    """One zxing card (plus the crashing fake) with the given overrides, skills limited to barcode reading."""
    zxing = {"name": "zxing", "description": "zxing-cpp barcode reader.", "capabilities": ["barcode"],
             "backend": {"type": "python", "entry": "maestro_graph.experts.zxing_barcode:ZXingBarcodeExpert"},
             "cost": {"per_call": 0.5}, "cacheable": False, **card}
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["barcode-reading", "barcode"],
                                    "models": [zxing]}))
    return Registry.load(path)


def _run(reg: Registry):
    return reg.run(Invoke("zxing", "barcode-reading"), question=QR_Q, images=[QR])


def test_transient_errors_are_retried_and_every_attempt_is_charged(tmp_path):
    reg = _registry(tmp_path, faults={"error_rate": 1.0}, retries={"attempts": 3, "backoff_s": 0.01})
    step = _run(reg)
    assert step.error_kind == "expert" and "injected fault: zxing.decode lost its connection" in step.error
    assert len(step.calls) == 3 and step.cost == pytest.approx(1.5)  # three attempts, three charges
    assert reg.models["zxing"].expert().injected["error"] == 3


def test_retries_recover_from_intermittent_faults(tmp_path):
    reg = _registry(tmp_path, faults={"error_rate": 0.5, "seed": 1}, retries={"attempts": 6, "backoff_s": 0.0})
    answers = [_run(reg) for _ in range(5)]
    assert all(s.answer == "Wikipedia" for s in answers)
    assert reg.models["zxing"].expert().injected["error"] > 0  # faults did happen, and were absorbed


def test_a_deterministic_crash_is_not_retried(tmp_path):
    reg = _registry(tmp_path, backend={"type": "python", "entry": "fakes:CrashingOCRExpert"},
                    capabilities=["barcode"], retries={"attempts": 3})
    step = _run(reg)
    assert step.error_kind == "expert" and len(step.calls) == 1 and step.cost == pytest.approx(0.5)


def test_backoff_grows_exponentially_with_jitter_and_a_cap(tmp_path):
    handle = _registry(tmp_path, retries={"attempts": 5, "backoff_s": 0.1, "max_backoff_s": 0.3, "jitter": 0.5}
                       ).models["zxing"]
    for retry, full in ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.3)):
        waits = [handle._backoff_s(retry) for _ in range(50)]
        assert all(full * 0.5 <= w <= full for w in waits) and len(set(waits)) > 1


def test_hangs_time_out_and_are_retried(tmp_path):
    reg = _registry(tmp_path, timeout_s=0.3, concurrency=2, faults={"hang_rate": 1.0, "hang_s": 1.0},
                    retries={"attempts": 2, "backoff_s": 0.0})
    start = time.perf_counter()
    step = _run(reg)
    assert time.perf_counter() - start < 1.5
    assert step.error_kind == "expert" and len(step.calls) == 2
    assert all(c["error"] == "model 'zxing'.decode timed out after 0.3s" for c in step.calls)


def test_circuit_breaker_drops_the_pair_then_recovers(tmp_path):
    reg = _registry(tmp_path, faults={"error_rate": 1.0}, breaker={"failures": 2, "open_s": 0.5})
    handle = reg.models["zxing"]
    assert reg.pair_ids() == ["zxing@@barcode-reading"]
    _run(reg), _run(reg)
    assert reg.pair_ids() == [] and "circuit breaker open" in handle.live_unavailable_reason()
    assert handle.unavailable_reason() is None  # the memoised install check is untouched
    refused = _run(reg)
    assert refused.error_kind == "policy" and "circuit breaker open" in refused.error and refused.cost == 0
    assert handle.expert().injected["error"] == 2  # the refused call never reached the expert
    time.sleep(0.6)
    assert reg.pair_ids() == ["zxing@@barcode-reading"]  # half-open: the next call is the trial
    trial = _run(reg)
    assert "injected fault" in trial.error and reg.pair_ids() == []  # the failed trial opens it again at once


def test_inputs_an_expert_rejects_never_open_its_breaker(tmp_path):
    """Five unreadable expressions in a row (a skill trying every option of a question) are answers about the input,
    not failures of the calculator: it stays available for the next step."""
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump({"skill_dirs": [str(ROOT / "skills")], "skills": ["calculator"], "models": [
        {"name": "sympy", "description": "SymPy.", "capabilities": ["math"], "cacheable": False,
         "breaker": {"failures": 2, "open_s": 30},
         "backend": {"type": "python", "entry": "maestro_graph.experts.sympy_math:SympyMathExpert"}}]}))
    handle = Registry.load(path).models["sympy"]
    ledger = Ledger()
    for bad in ("\\hline 0", "((", "1 = 2 = 3", ""):
        with pytest.raises(ExpertRejected):
            handle.call("evaluate", (bad,), {}, ledger)
    assert handle.live_unavailable_reason() is None
    assert {c.failure for c in ledger.calls} == {ExpertFailure.REJECTED}
    assert handle.call("evaluate", ("2*(3+4)",), {}, ledger) == "14"


def test_garbage_and_oversized_results_are_the_experts_error(tmp_path):
    garbage = _run(_registry(tmp_path, faults={"garbage_rate": 1.0}))
    assert garbage.error_kind == "expert"
    assert "model 'zxing'.decode returned bytes, not the list its method declares" in garbage.error
    big = _run(_registry(tmp_path, faults={"oversized_rate": 1.0}))
    assert big.error_kind == "expert"
    assert f"returned an oversized result: {MAX_RESULT_ITEMS + 1:,} items" in big.error
    assert garbage.cost == pytest.approx(0.5)  # the call ran: it is charged


def test_fault_rates_are_validated(tmp_path):
    with pytest.raises(ConfigError) as info:
        _registry(tmp_path, faults={"error_rate": 0.7, "hang_rate": 0.5})
    assert "models.0.faults" in str(info.value) and "exceeds 1" in str(info.value)


def test_broken_skills_are_contained(tmp_path):
    reg = Registry.load(bad_skill_registry(tmp_path, skill_timeout_s=0.5))
    start = time.perf_counter()
    steps = {s: reg.run(Invoke("zxing", s), question=QR_Q, images=[QR]) for s in ("raiser", "sleeper", "wrong-type")}
    assert time.perf_counter() - start < 5
    assert all(s.error_kind == "skill" and s.answer is None for s in steps.values())
    assert steps["raiser"].error == "skill 'raiser' crashed: RuntimeError: skill bug"
    assert steps["sleeper"].error == "skill 'sleeper' did not finish within 0.5s (skill_timeout_s)"
    assert "returned dict; a tier-1 skill returns SkillResult" in steps["wrong-type"].error


def test_skill_folder_linking_outside_the_skill_dir_is_refused(tmp_path):
    outside = tmp_path / "outside" / "evil"
    outside.mkdir(parents=True)
    (outside / "SKILL.md").write_text("---\nname: evil\ndescription: x\nmetadata: {tier: \"1\", requires: ocr, "
                                      "entry: \"skill.py:run\"}\n---\n")
    (outside / "skill.py").write_text("def run(ctx):\n    pass\n")
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "evil").symlink_to(outside, target_is_directory=True)
    from maestro_graph.errors import SkillError
    from maestro_graph.registry import discover_skills

    with pytest.raises(SkillError, match="outside the skill directory") as info:
        discover_skills([skills])
    assert info.value.field == "skill_dirs"


def test_interrupted_prediction_run_resumes_without_redoing_items(tmp_path, registry):
    (tmp_path / "qr.png").write_bytes(Path(QR).read_bytes())
    (tmp_path / "circles.png").write_bytes(Path(CIRCLES).read_bytes())
    rows = [{"id": "q", "question": QR_Q, "images": ["qr.png"], "answer": "Wikipedia", "source": "s"},
            {"id": "c", "question": "How many circles are in the image?", "images": ["circles.png"], "answer": "7",
             "answer_type": "number", "source": "s"}]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "pred.jsonl"
    predict(registry, tasks, out, policy="rules", progress=False)
    first, second = out.read_text().splitlines()
    marked = json.dumps({**json.loads(first), "latency_s": -1.0})  # proves the kept record is not recomputed
    out.write_text(marked + "\n" + second[: len(second) // 2])  # killed while writing the second record
    summary = predict(registry, tasks, out, policy="rules", progress=False, resume=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["q", "c"] and records[0]["latency_s"] == -1.0
    assert summary.accuracy() == {"s": 1.0}
    again = predict(registry, tasks, out, policy="rules", progress=False, resume=True)  # nothing left to do
    assert out.read_text().splitlines()[0] == marked and again.accuracy() == {"s": 1.0}


def test_bad_input_suite_all_as_expected(tmp_path):
    reg = Registry.load(fault_registry(tmp_path, None))
    cases = bad_input_suite(tmp_path / "inputs", reg)
    assert len(cases) == 19
    assert [c for c in cases if not c.ok] == []
