"""Profiling a served vision-language card tells failure from inaccuracy: against a stopped endpoint `maestro
registry profile` names the failures, exits non-zero and writes no accuracy for those pairs (and merge_profile.py
refuses the part); a profile stays valid when the endpoint moves to another port or gains a replica; profiling sends
as many calls at once as the card's `concurrency` allows. The endpoint is VisionEndpointDouble (tests/vision_double.py),
for its scripted delay and count of requests at once; `maestro registry profile` measuring real vLLM's pairs is
tests/test_vllm_vision.py's test_profile_measures_the_pairs_and_serve_routes_to_the_profiled_pair."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from servers import free_port
from typer.testing import CliRunner
from vision_double import VisionEndpointDouble

from maestro_graph.doors.cli import app
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT / "tests" / "data" / "real" / "charts"
SKILLS = ROOT / "skills"


def _card(urls: list[str], *, timeout_s: float = 5, concurrency: int = 4) -> str:
    backend = f"base_url: \"{urls[0]}\"" if len(urls) == 1 else f"base_urls: {json.dumps(urls)}"
    return f"""
  - name: vlm
    description: A vision-language chat model served by vLLM (a test double here).
    capabilities: [vision-chat]
    backend: {{type: openai, {backend}, model: vlm-double, max_tokens: 16}}
    cost: {{per_call: 1.0}}
    timeout_s: {timeout_s}
    concurrency: {concurrency}
    retries: {{attempts: 1}}
"""


def _registry(folder: Path, card: str, profile: str | None = None) -> Path:
    path = folder / "part.yaml"
    path.write_text(f"skill_dirs: [{SKILLS}]\nskills: [chart-qa, table-qa]\n"
                    + (f"profile: {profile}\n" if profile else "") + f"models:{card}")
    return path


def _calibration(folder: Path) -> Path:
    shutil.copytree(CHARTS, folder / "charts")
    return folder / "charts" / "tasks.jsonl"


def _profile(registry: Path, tasks: Path, out: Path):
    return CliRunner().invoke(app, ["registry", "profile", "--registry", str(registry), "--tasks", str(tasks),
                                    "--out", str(out), "--cache-dir", str(out.parent / "cache")])


def test_a_stopped_endpoint_is_named_and_not_profiled_as_a_useless_model(tmp_path):
    tasks = _calibration(tmp_path)
    registry = _registry(tmp_path, _card([f"http://127.0.0.1:{free_port()}/v1"], timeout_s=2))  # nothing listens
    out = tmp_path / "part.profile.json"
    result = _profile(registry, tasks, out)
    assert result.exit_code != 0, result.output
    assert "not measured" in result.output and "vlm@@chart-qa" in result.output
    assert "cannot reach" in result.output and "unavailable" in result.output
    written = json.loads(out.read_text())  # what was measured is kept, and names what was not
    assert written["pairs"] == []  # no 0.000 for a pair whose calls failed
    assert {u["pair"] for u in written["unmeasured"]} == {"vlm@@chart-qa", "vlm@@table-qa"}
    assert all("9 of 9 calls failed" in u["reason"] for u in written["unmeasured"])
    # the failure that opened the breaker is the reason, not the breaker's later refusals; no figure is printed
    assert all("cannot reach" in u["reason"] and "breaker" not in u["reason"] for u in written["unmeasured"])
    assert "0.000" not in result.output and "policies read it" not in result.output, result.output
    full = tmp_path / "full.yaml"
    full.write_text(f"extends: {registry.name}\nprofile: full.profile.json\n")
    (tmp_path / "full.profile.json").write_text(json.dumps({**written, "unmeasured": []}))
    merged = subprocess.run([sys.executable, str(ROOT / "scripts" / "merge_profile.py"), "--registry", str(full),
                             "--part", str(out), "--profile", str(tmp_path / "full.profile.json")],
                            capture_output=True, text=True, cwd=ROOT)
    assert merged.returncode != 0 and "were not measured" in merged.stderr, merged.stderr


def test_moving_the_endpoint_keeps_the_profile_and_profiling_honours_concurrency(tmp_path):
    tasks = _calibration(tmp_path)
    with VisionEndpointDouble(default="Yes", delay_s=0.3) as first:
        registry = _registry(tmp_path, _card([first.url], concurrency=4), profile="part.profile.json")
        result = _profile(registry, tasks, tmp_path / "part.profile.json")
        assert result.exit_code == 0, result.output
        assert first.peak == 4, first.peak  # the card's concurrency, not the two --workers
    written = json.loads((tmp_path / "part.profile.json").read_text())
    assert {e["pair"] for e in written["pairs"]} == {"vlm@@chart-qa", "vlm@@table-qa"}
    assert all(e["failures"] == 0 and e["items"] == 9 for e in written["pairs"])
    with VisionEndpointDouble() as moved, VisionEndpointDouble() as replica:
        for card in (_card([moved.url]), _card([moved.url, replica.url], timeout_s=30, concurrency=16)):
            _registry(tmp_path, card, profile="part.profile.json")
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a stale entry would warn
                profiled = Registry.load(tmp_path / "part.yaml", cache=None)
            assert set(profiled.profiles) == {"vlm@@chart-qa", "vlm@@table-qa"}
        _registry(tmp_path, _card([moved.url]).replace("model: vlm-double", "model: another-model"),
                  profile="part.profile.json")
        with warnings.catch_warnings(record=True):
            assert Registry.load(tmp_path / "part.yaml", cache=None).profiles == {}  # another served model
