"""The habits a maintainer expects, checked by the suite: ruff (pyflakes, isort, bugbear, pyupgrade, line length) and
mypy report nothing, and every logger is named in the `maestro.*` hierarchy that `maestro serve`'s log configuration
(doors/serve/observability.py) and docs/serving.md rely on. Both tools come with the `test` extra; without one, its test
skips and says how to install it."""

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINTED = ("maestro_graph", "graphs", "skills", "scripts", "tests", "setup.py")
"""What ruff checks; mypy's files are in its own section (not skills/: their folders are plug-ins, not packages)."""
LOGGED = ("maestro_graph", "graphs", "scripts")
"""Where loggers are made (tests may attach to any logger they observe)."""
LOGGER_ROOT = "maestro"
"""The one logger hierarchy: `maestro serve --log-level` configures it, and the docs name its loggers."""


def _tool(module: str) -> list[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: `pip install -e '.[test]'` (scripts/setup.sh does) adds it")
    return [sys.executable, "-m", module]


def test_ruff_finds_nothing():
    run = subprocess.run([*_tool("ruff"), "check", "--no-cache", *LINTED], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_finds_nothing():
    """mypy as pyproject.toml configures it (the modules still excused are listed there, each to be taken off once
    clean). Its cache (.mypy_cache/) makes a run after the first take seconds."""
    run = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def misnamed_loggers(source: str) -> list[tuple[int, str]]:
    """(line, source of the name) of each `getLogger(...)` call in `source` whose name is not a string literal in the
    LOGGER_ROOT hierarchy (`__name__` would name it `maestro_graph.*`, outside what the log configuration sets up)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "getLogger"
                                           or getattr(node.func, "id", None) == "getLogger"):
            name = node.args[0] if node.args else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and (name.value == LOGGER_ROOT or name.value.startswith(LOGGER_ROOT + "."))):
                found.append((node.lineno, ast.unparse(name) if name is not None else "(the root logger)"))
    return found


def test_every_logger_is_named_in_the_maestro_hierarchy():
    found = [f"{path.relative_to(ROOT)}:{line}: getLogger({name})"
             for folder in LOGGED for path in sorted((ROOT / folder).rglob("*.py"))
             for line, name in misnamed_loggers(path.read_text())]
    assert found == [], f"name loggers `{LOGGER_ROOT}.<area>`, e.g. logging.getLogger(\"{LOGGER_ROOT}.serve\")"


def test_the_logger_check_finds_other_names():
    source = ('import logging\nfrom logging import getLogger\na = logging.getLogger("maestro.serve")\n'
              'b = logging.getLogger(__name__)\nc = getLogger("maestros")\nd = logging.getLogger()\n')
    assert misnamed_loggers(source) == [(4, "__name__"), (5, "'maestros'"), (6, "(the root logger)")]
