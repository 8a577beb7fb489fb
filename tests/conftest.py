"""Shared fixtures: one registry per session (models load once), and the real-item samples under tests/data/real."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# pytest keeps a rewritten test module (its asserts made to explain themselves) only where Python may write bytecode:
# under PYTHONDONTWRITEBYTECODE (set on the shared 2-core machine) each worker rewrote all of them again, about 4 s
# each run; allowed while the tests are collected (pytest_collection_finish puts the setting back)
_DONT_WRITE_BYTECODE, sys.dont_write_bytecode = sys.dont_write_bytecode, False

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
from typing import TYPE_CHECKING

import pytest

from maestro_graph.core.tasks import Task, load_tasks

if TYPE_CHECKING:  # imported by the fixture: xdist's controller, which runs no test, then starts its workers sooner
    from maestro_graph.registry import Registry

DATA = Path(__file__).parent / "data"
REAL = DATA / "real"
ONE_WORKER_MODULES = frozenset({
    "tests/test_vllm.py", "tests/test_vllm_vision.py",  # a real vLLM server, minutes to start
    "tests/test_trust_boundary.py", "tests/test_traffic.py",  # a `maestro serve` subprocess, about 10 s to start
    "tests/test_export.py",  # a `maestro predict` run on real table items
    "tests/test_profiles.py",  # the recipe's 42 generated items and their reach features
    "tests/test_routing_record.py",  # both registries route the same sample: its features are computed once
    "tests/test_skill_forms.py",  # a registry of its own, SmolLM2 and the OCR engines in it, and a scripted endpoint
})
"""Modules whose tests share one expensive module fixture (a real server, a run, generated items): all their tests
run on one xdist worker, so the fixture is made once, not once per worker. xdist's own `xdist_group` marks do
nothing under pytest 9 (the group suffix it writes to a test's node id is not read back), hence this scheduler; its
`loadscope` ordering sends these modules out first, the largest first."""


def pytest_xdist_make_scheduler(config, log):
    """`-n N` as xdist's default `load` distribution, except that each of ONE_WORKER_MODULES goes to one worker."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerServerModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return OneWorkerPerServerModule(config, log)


def pytest_collection_finish(session) -> None:
    sys.dont_write_bytecode = _DONT_WRITE_BYTECODE


@pytest.fixture(scope="session")
def registry() -> Registry:
    from maestro_graph.registry import Registry

    return Registry.load()


def real_tasks(area: str) -> list[Task]:
    """The real benchmark items sampled for one area (tests/data/real/<area>/tasks.jsonl)."""
    tasks, problems = load_tasks(REAL / area / "tasks.jsonl")
    assert not problems, problems
    return tasks
