"""docs/vision-language.md as a user follows it: every command of the page's shell blocks runs as written, in a folder
laid out like a checkout (the repository's `.venv`, `scripts`, `configs` and `examples`), with the registry files the
page shows (its YAML blocks that open with `# NAME.yaml:`) written there and a few labelled real items as the user's
own task files (`my-tasks.jsonl`, `real-dev.jsonl`). The vision-language server the cards name is the loopback
double (tests/vision_double.py, standing for `vllm serve`) on a free port, put in the files' `base_url` as the page
says to. Lines the page marks `# GPU only` are not run here; they must be those that start vLLM or need the GPU
training's output. `maestro` lines run in this process through typer's runner, the same entry point given the same
words (a subprocess each would spend seconds importing the package again); every other line runs in bash."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REAL
from servers import server_env
from typer.testing import CliRunner
from vision_double import VisionEndpointDouble

from maestro_graph.cli import app
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "vision-language.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
GPU_ONLY = "# GPU only"
PAGE_PORT = "http://127.0.0.1:8101/v1"
"""Where the page's cards expect the served model (scripts/serve-vlm.sh's port for the first Qwen card)."""
CHECKOUT = (".venv", "scripts", "configs", "examples")


def page_blocks(kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall(PAGE.read_text()) if lang == kind]


def page_commands() -> list[str]:
    """Each command line of the page's bash blocks (continuations joined), comments kept."""
    lines = []
    for block in page_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return lines


def page_files() -> dict[str, str]:
    """The files the page shows in full: YAML blocks whose first line is `# NAME.yaml: what it is`."""
    files = {}
    for block in page_blocks("yaml"):
        first = block.splitlines()[0]
        named = re.match(r"# ([\w.-]+\.yaml):", first)
        if named:
            files[named.group(1)] = block
    return files


def users_task_file(folder: Path, name: str) -> Path:
    """A labelled task file of the user's own: four real barcode items and four real vision items, images beside."""
    lines = []
    for area in ("barcode", "vision"):
        source = REAL / area / "tasks.jsonl"
        for line in source.read_text().splitlines()[:4]:
            task = json.loads(line)
            for image in task["images"]:
                (folder / image).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source.parent / image, folder / image)
            lines.append(json.dumps(task))
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def run(command: str, folder: Path) -> str:
    words = shlex.split(command, comments=True)
    if words[0] == ".venv/bin/maestro":
        result = CliRunner().invoke(app, words[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}"
        return result.output
    done = subprocess.run(["bash", "-c", command], cwd=folder, env=server_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_page_marks_only_what_needs_a_gpu():
    gpu = [c for c in page_commands() if GPU_ONLY in c]
    assert len(gpu) == 3
    for command in gpu:
        words = shlex.split(command, comments=True)
        starts_vllm = words[0] == "scripts/serve-vlm.sh" and "--dry-run" not in words
        trains = words[:2] == [".venv/bin/maestro", "train-lm"] and "configs/train-lm-gpu.yaml" in words
        uses_training = any("runs/train-lm-gpu/final" in w for w in words)
        assert starts_vllm or trains or uses_training, command
    assert {"part.yaml", "my-vlm.yaml"} <= set(page_files())


@pytest.mark.slow
def test_every_command_of_the_vision_language_page_runs_as_written(tmp_path, monkeypatch):
    for name in CHECKOUT:
        (tmp_path / name).symlink_to(ROOT / name)
    users_task_file(tmp_path, "my-tasks.jsonl")
    users_task_file(tmp_path, "real-dev.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VLM_API_KEY", raising=False)
    outputs = {}
    with VisionEndpointDouble(model="Qwen/Qwen2.5-VL-7B-Instruct", default="7") as double:
        for name, text in page_files().items():
            assert PAGE_PORT in text, name
            (tmp_path / name).write_text(text.replace(PAGE_PORT, double.url))
        for command in page_commands():
            if GPU_ONLY not in command:
                outputs[command] = run(command, tmp_path)
    assert len(outputs) >= 14
    # the dry run prints one quoted `vllm serve` per served card
    dry_run = next(out for command, out in outputs.items() if "--dry-run" in command)
    assert dry_run.count("vllm serve") == 2 and "'{\"image\": 4, \"video\": 0}'" in dry_run
    # the card's pairs were profiled through the served model, merged into the registry's profile, and read by it
    assert len({r.system for r in double.requests}) >= 5  # the card called under several skills' instructions
    part = json.loads((tmp_path / "part.profile.json").read_text())
    assert not part.get("unmeasured") and {p["pair"] for p in part["pairs"]} >= {"qwen2.5-vl-7b@@chart-qa"}
    merged = {p["pair"] for p in json.loads((tmp_path / "my-vlm.profile.json").read_text())["pairs"]}
    assert {"qwen2.5-vl-7b@@chart-qa", "rapidocr@@chart-qa"} <= merged
    profiled = {p.id: p.profile for p in Registry.load(tmp_path / "my-vlm.yaml", cache=None).pairs()}
    assert profiled["qwen2.5-vl-7b@@chart-qa"] is not None  # the `profile:` line: the merged profile is read
    for report in ("runs/my-vlm", "runs/neural-skill-prior"):
        assert any((tmp_path / report).iterdir()), report
    assert (tmp_path / "trl.jsonl").read_text().strip()
    asked = next(out for command, out in outputs.items() if command.startswith('.venv/bin/maestro ask "How many'))
    assert "answer:" in asked
