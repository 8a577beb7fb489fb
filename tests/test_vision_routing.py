"""The shipped neural policy meets a vision-language card it never trained with: a `vision-chat` card on
VisionEndpointDouble, added to configs/registry-nolm.yaml by a registry that extends it, profiled with `maestro
registry profile` on one half of the small real labelled items (tests/data/real) and evaluated on the other half.

The double is right on chart questions told by the chart skill's instructions (its `SKILL.md` body as the system
message), and wrong (in the asked form) under any other skill's and on every other kind: its lookup is built here
from the labelled items, so nothing in the package knows which questions are charts. So the policy must pick the
pair, not only the model: the card called with the table skill's instructions on a chart is wrong. What is tested is
routing to a measured new expert; it says nothing about any real vision-language model's accuracy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner
from vision_double import Asked, VisionEndpointDouble, image_digest

from maestro_graph.doors.cli import app
from maestro_graph.numbers import parse_number
from maestro_graph.registry import load_skill
from maestro_graph.registry.reach import reach_path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "real"
NOLM = ROOT / "configs" / "registry-nolm.yaml"
SKILLS = ROOT / "skills"
CARD = "vlm"
RIGHT_ON = "chart"
"""The one domain whose questions the double answers right..."""
RIGHT_UNDER = "chart-qa"
"""...and the one skill under whose instructions it does."""


def vlm_card(url: str) -> str:
    """The new expert's card, as configs/registry-vlm.yaml's Qwen2.5-VL card reads (its text is what the neural
    policy scores); images are sent whole (max_input_side above every test image) so the double knows them."""
    return f"""
  - name: {CARD}
    description: >-
      Qwen2.5-VL-7B-Instruct, a 7B vision-language chat model served by vLLM on a local GPU. Sees the images: reads
      charts, tables, documents and scene text, counts objects, answers questions about what is shown and picks
      options. Slower and costlier per call than the CPU experts.
    capabilities: [vision-chat]
    backend: {{type: openai, base_url: "{url}", model: vlm-double, max_tokens: 64}}
    cost: {{per_call: 1.0, per_1k_tokens: 0.5}}
    timeout_s: 30
    concurrency: 4
    max_input_side: 4096
"""


def wrong_answer(task: dict) -> str:
    """An answer in the form the item asks for that is not its answer: another option, the other of yes/no, the
    number plus one, or a word."""
    gold = str(task["answer"])
    if task.get("choices"):
        return next(o for o in task["choices"] if o != gold)
    if gold.lower() in {"yes", "no"}:
        return "No" if gold.lower() == "yes" else "Yes"
    number = parse_number(gold)
    return f"{number + 1:g}" if number is not None else "none"


def split_real(folder: Path) -> tuple[Path, Path]:
    """tests/data/real copied to `folder`, its items cut into a calibration half and an evaluation half (alternate
    items of each kind), as two task files."""
    shutil.copytree(REAL, folder, dirs_exist_ok=True)
    halves: tuple[list[str], list[str]] = ([], [])
    for tasks in sorted(folder.glob("*/tasks.jsonl")):
        for i, line in enumerate(tasks.read_text().splitlines()):
            task = json.loads(line)
            task["images"] = [f"{tasks.parent.name}/{image}" for image in task["images"]]
            halves[i % 2].append(json.dumps(task))
    calibration, evaluation = folder / "calibration.jsonl", folder / "evaluation.jsonl"
    calibration.write_text("\n".join(halves[0]) + "\n")
    evaluation.write_text("\n".join(halves[1]) + "\n")
    return calibration, evaluation


def double_lookup(*task_files: Path) -> dict[str, list[Asked]]:
    """Image digest -> the questions asked of it, for every labelled item: its answer on RIGHT_ON items under
    RIGHT_UNDER's instructions, a wrong one else."""
    instructions = load_skill(SKILLS / RIGHT_UNDER).instructions
    lookup: dict[str, list[Asked]] = {}
    for path in task_files:
        for line in path.read_text().splitlines():
            task = json.loads(line)
            wrong = wrong_answer(task)
            answer = str(task["answer"]) if task["domain"] == RIGHT_ON else wrong
            for image in task["images"]:
                with Image.open(path.parent / image) as picture:
                    lookup.setdefault(image_digest(picture), []).append(
                        Asked(task["question"], answer, wrong, instructions))
    return lookup


def merge_new_card(registry: Path, base: Path, part: Path, out: Path) -> None:
    """The base profile (and its reach) with the part's entries and outcomes added, by scripts/merge_profile.py as a
    user adding an expert runs it: the new card's items are rows of their own in the reach."""
    shutil.copy(base, out)
    shutil.copy(reach_path(base), reach_path(out))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "merge_profile.py"), "--registry", str(registry),
                    "--part", str(part), "--profile", str(out)], check=True, cwd=ROOT)


def invoke(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


def first_calls(predictions: Path) -> tuple[dict[str, Counter], dict[str, list[float]]]:
    """Per domain: how often each pair was called first, and the items' scores."""
    calls: dict[str, Counter] = {}
    scores: dict[str, list[float]] = {}
    for line in predictions.read_text().splitlines():
        row = json.loads(line)
        first = next((d["pair"] for d in row["decisions"] if d["kind"] == "invoke"), "none@@")
        calls.setdefault(row["domain"], Counter())[first] += 1
        scores.setdefault(row["domain"], []).append(row["score"])
    return calls, scores


@pytest.mark.slow
def test_the_shipped_policy_routes_charts_to_a_profiled_new_card_and_keeps_the_cpu_pairs_elsewhere(tmp_path):
    calibration, evaluation = split_real(tmp_path / "real")
    cache = str(tmp_path / "cache")
    with VisionEndpointDouble(lookup=double_lookup(calibration, evaluation)) as double:
        part = tmp_path / "part.yaml"  # the new card's pairs only, measured on their own
        part.write_text(f"skill_dirs: [{SKILLS}]\nmodels:{vlm_card(double.url)}")
        invoke("registry", "profile", "--registry", str(part), "--tasks", str(calibration),
               "--out", str(tmp_path / "part.profile.json"), "--cache-dir", cache)
        extended = tmp_path / "registry-vlm.yaml"  # the shipped registry, never edited, with one more card
        extended.write_text(f"extends: {NOLM}\nprofile: vlm.profile.json\nmodels:{vlm_card(double.url)}")
        merge_new_card(extended, NOLM.with_name("registry-nolm.profile.json"), tmp_path / "part.profile.json",
                       tmp_path / "vlm.profile.json")
        for name, registry in (("before", NOLM), ("after", extended)):
            invoke("eval", "--tasks", str(evaluation), "--registry", str(registry), "-p", "neural",
                   "--out", str(tmp_path / name), "--cache-dir", cache)
    before, before_scores = first_calls(tmp_path / "before" / "predictions" / "neural.jsonl")
    after, after_scores = first_calls(tmp_path / "after" / "predictions" / "neural.jsonl")
    table = {d: (dict(before[d]), dict(after[d]), sum(before_scores[d]), sum(after_scores[d])) for d in after}
    right_pair = f"{CARD}@@{RIGHT_UNDER}"
    card_on_charts = Counter({pair: n for pair, n in after[RIGHT_ON].items() if pair.startswith(f"{CARD}@@")})
    assert card_on_charts and set(card_on_charts) == {right_pair}, table  # the card with the chart skill, only
    assert all(pair.endswith(f"@@{RIGHT_UNDER}") for pair in before[RIGHT_ON]), table  # the CPU pairs too
    assert sum(after_scores[RIGHT_ON]) >= sum(before_scores[RIGHT_ON]), table
    calls = _calls(tmp_path / "after" / "predictions" / "neural.jsonl")
    assert not any(pair.startswith(f"{CARD}@@") and pair != right_pair for pair in calls[RIGHT_ON]), calls
    others = sum(sum(c.values()) for d, c in after.items() if d != RIGHT_ON)
    called = sum(n for d, c in after.items() if d != RIGHT_ON for pair, n in c.items() if pair.startswith(f"{CARD}@@"))
    assert called <= 0.2 * others, table  # elsewhere the CPU pairs are still called first


def _calls(predictions: Path) -> dict[str, Counter]:
    """Per domain: every pair called, first or later."""
    calls: dict[str, Counter] = {}
    for line in predictions.read_text().splitlines():
        row = json.loads(line)
        calls.setdefault(row["domain"], Counter()).update(d["pair"] for d in row["decisions"] if d["kind"] == "invoke")
    return calls
