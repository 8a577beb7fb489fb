"""The `maestro` command as a person reads it in an 80-column terminal, through its own entry point: every
command's and group's `--help`, and `ask`'s table of steps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from maestro_graph.doors.cli import app, common

ROOT = Path(__file__).resolve().parents[1]

runner = CliRunner()


def _commands(group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command and group under `group` (a Typer group), the root included."""
    found = [path]
    for name, command in group.commands.items():
        found += _commands(command, (*path, name)) if hasattr(command, "commands") else [(*path, name)]
    return found


COMMANDS = _commands(typer.main.get_command(app))


def _help(path: tuple[str, ...]) -> list[str]:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_every_command_is_walked():
    assert {("ask",), ("eval",), ("train-lm",), ("registry", "profile"), ("cache", "clear"), ("bench", "make")} \
        <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "maestro")
def test_help_fits_80_columns_without_ragged_lines(path):
    """Nothing is wider than the terminal, and a description's paragraph fills its lines: a docstring's source
    line breaks (kept by Typer's rich help) once left half-empty lines in the middle of sentences."""
    lines = _help(path)
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    description = lines[next(i for i, line in enumerate(lines) if "Usage:" in line) + 1:
                        next(i for i, line in enumerate(lines) if line.startswith("╭"))]
    text = [line.strip() for line in description]
    ragged = [line for line, after in zip(text, text[1:])
              if line and after and not re.match(r"\d+ |- ", after) and not line.endswith(":") and len(line) < 60]
    assert ragged == []


def test_the_command_list_gives_each_command_a_short_summary():
    """The root help lists each command by the first paragraph of its help, in at most two lines."""
    lines = _help(())
    panel = lines[next(i for i, line in enumerate(lines) if "Commands" in line) + 1:-1]
    starts = [i for i, line in enumerate(panel) if re.match(r"│ [a-z]", line)]
    assert len(starts) == len(typer.main.get_command(app).commands)
    assert max(b - a for a, b in zip(starts, [*starts[1:], len(panel)])) <= 2, panel


def test_ask_at_80_columns_cuts_no_name(monkeypatch):
    """At 80 columns the bordered table of steps cut the skill's name ("barcode-read…"); the narrow form has no
    borders and no error column (an error gets a line of its own), so every name is whole."""
    monkeypatch.setattr(common.console, "width", 80)
    result = runner.invoke(app, ["ask", "What does the QR code say?", "--image", str(ROOT / "examples" / "qrcode.png"),
                                 "--policy", "fixed:zxing@@barcode-reading"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in result.output, lines
    assert [line.split() for line in lines if "zxing" in line][0][:4] == ["1", "zxing", "barcode-reading", "Wikipedia"]
    assert lines[-1].startswith("answer: Wikipedia   (confidence")
