"""Shared fixtures: one registry per session (models load once), and the real-item samples under tests/data/real."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# rich folds messages at the terminal's width, so a long checkout path would split the words tests look for
os.environ["COLUMNS"] = "400"
# typer reads TERMINAL_WIDTH once, when `typer.rich_utils` is first imported: imported here, so that a test that
# narrows the terminal for one invocation (test_cli_narrow) does not narrow every later help of its process
import typer.rich_utils  # noqa: E402,F401
# the CLI's expert cache (and every subprocess's) goes to a folder of this run, not into the repository, and goes
# with the run (each xdist worker makes its own)
os.environ["MAESTRO_CACHE_DIR"] = tempfile.mkdtemp(prefix="maestro-test-cache-")
atexit.register(shutil.rmtree, os.environ["MAESTRO_CACHE_DIR"], ignore_errors=True)

from pathlib import Path

import pytest

from maestro_graph.core.tasks import Task, load_tasks
from maestro_graph.registry import Registry

DATA = Path(__file__).parent / "data"
REAL = DATA / "real"


@pytest.fixture(scope="session")
def registry() -> Registry:
    return Registry.load()


def real_tasks(area: str) -> list[Task]:
    """The real benchmark items sampled for one area (tests/data/real/<area>/tasks.jsonl)."""
    tasks, problems = load_tasks(REAL / area / "tasks.jsonl")
    assert not problems, problems
    return tasks
