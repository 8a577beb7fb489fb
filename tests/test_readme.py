"""The README's examples run as written: its Python blocks are executed from the repo root, and its quick-start
command answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maestro_graph.doors.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_the_readme_has_python_examples():
    assert any("build_agent(maestro)" in block for block in PYTHON_BLOCKS)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.splitlines()[0][:40])
def test_each_python_block_runs(block, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})


def test_the_first_screen_question_answers(monkeypatch):
    command = re.search(r'`maestro ask "What text does the QR code encode\?" --image (\S+)`', README)
    assert command, "the first screen names its example command"
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["ask", "What text does the QR code encode?", "--image", command.group(1)])
    assert result.exit_code == 0 and "answer: Wikipedia" in result.output, result.output
