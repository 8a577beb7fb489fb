"""The package is self-contained: a wheel built from the repo, installed into a fresh venv, answers `maestro ask`
from a directory outside the repo with its own skills, registry, checkpoint and example images, and its graphs
import without PYTHONPATH. Nothing is downloaded: the fresh venv sees the project venv's dependencies through a
path file (a plain path line, so the project's editable install of maestro_graph is not activated there)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(work / "dist")], check=True, capture_output=True, timeout=300)
    wheel = next((work / "dist").glob("maestro_graph-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return venv


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_the_installed_wheel_answers_from_outside_the_repo(fresh_venv, tmp_path):
    python = fresh_venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import maestro_graph, maestro_graph.graphs as g; "
                            "from maestro_graph.policy import SHIPPED_CHECKPOINT; "
                            "print(maestro_graph.__file__); print(SHIPPED_CHECKPOINT.is_file()); "
                            "print(callable(g.build_agent) and callable(g.maestro_tool))"],
                           cwd=tmp_path, env=_env(), check=True, capture_output=True, text=True).stdout.split()
    package = Path(where[0]).parent
    assert package.is_relative_to(fresh_venv) and where[1:] == ["True", "True"]
    example = package / "examples" / "qrcode.png"
    done = subprocess.run([str(fresh_venv / "bin" / "maestro"), "ask", "What text does the QR code encode?",
                           "--image", str(example)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "answer: Wikipedia" in done.stdout
    listed = subprocess.run([str(fresh_venv / "bin" / "maestro"), "skills", "list", "--json"], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and '"table-qa"' in listed.stdout
