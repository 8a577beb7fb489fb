"""The environment variables Maestro reads: one module names and reads them, docs/environment.md is its table, and
each variable still does what its row says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from maestro_graph.core import environment
from maestro_graph.core.environment import (
    API_KEY,
    CACHE_DIR,
    CACHE_TTL_S,
    DEVICE,
    ENVIRONMENT,
    HF_HUB_OFFLINE,
    IMAGE_DIRS,
    IMAGE_HOSTS,
    LIBRARY_ENVIRONMENT,
    MODELS_DIR,
    OMP_NUM_THREADS,
    POLICIES,
    POLICY,
    REGISTRY,
    SUITE_OWNER_KEYS,
    TOKENIZERS_PARALLELISM,
    TRUST_SUITE_UNSET_KEY,
    present,
    set_process_defaults,
)

ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"MAESTRO_[A-Z0-9_]+")
_ENVIRON = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
"""What of `os` reads or writes the process's environment."""


def test_docs_tables_are_the_modules():
    docs = (ROOT / "docs" / "environment.md").read_text()
    assert environment.table() in docs and environment.table(LIBRARY_ENVIRONMENT) in docs


def _environ_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Where `tree` touches the process's environment through `os`: `os.environ` (or `getenv`, `putenv`, ...) under
    whatever name `os` was imported as, and `from os import environ`."""
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
               if a.name == "os"}
    uses = [(node.lineno, f"os.{node.attr}") for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and node.attr in _ENVIRON and isinstance(node.value, ast.Name) and node.value.id in aliases]
    uses += [(node.lineno, f"from os import {a.name}") for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module == "os" for a in node.names if a.name in _ENVIRON]
    return uses


def test_no_other_module_touches_the_environment():
    """Only the environment module reads or sets the process's environment: every variable the package or graphs/
    read or set is declared there, with its row in docs/environment.md."""
    strays = [f"{path.relative_to(ROOT)}:{line}: {use}"
              for path in sorted([*(ROOT / "maestro_graph").rglob("*.py"), *(ROOT / "graphs").rglob("*.py")])
              if path != Path(environment.__file__).resolve()
              for line, use in _environ_uses(ast.parse(path.read_text()))]
    assert strays == []
    # the walk finds what it looks for, under any name
    found = _environ_uses(ast.parse("import os as o\nfrom os import getenv\no.environ['X'] = '1'\nos.putenv('Y', '')"))
    assert found == [(3, "os.environ"), (2, "from os import getenv")]


def test_no_other_module_names_or_reads_a_maestro_variable():
    """A `MAESTRO_*` name written as a string anywhere in the package, graphs/ or scripts/ outside the environment
    module is a variable read (or set) past the one list; every name in that list is unique."""
    strays = []
    for path in sorted([*(ROOT / "maestro_graph").rglob("*.py"), *(ROOT / "graphs").rglob("*.py"),
                        *(ROOT / "scripts").rglob("*.py")]):
        if path == Path(environment.__file__).resolve():
            continue
        tree = ast.parse(path.read_text())
        defined = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                   if isinstance(t, ast.Name)}  # a Python name in `__all__`, such as MAESTRO_BODY_FIELDS
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAME.fullmatch(node.value) \
                    and node.value not in defined:
                strays.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert strays == []
    assert len({v.name for v in ENVIRONMENT}) == len(ENVIRONMENT) == 13
    assert not {v.name for v in ENVIRONMENT} & {v.name for v in LIBRARY_ENVIRONMENT}


def test_each_variable_does_what_its_row_says(monkeypatch, tmp_path):
    from maestro_graph.backends.hf import default_device, models_dir
    from maestro_graph.cache.backends import DEFAULT_TTL_S
    from maestro_graph.doors.cli.options import CacheDirOpt, CacheTtlOpt
    from maestro_graph.doors.serve.settings import ServeSettings
    from maestro_graph.images.sources import ImageSources
    from maestro_graph.policy import PolicyCatalog

    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable.name, raising=False)
    assert PolicyCatalog.from_env().names == tuple(POLICIES.default.split(","))
    assert models_dir() == Path.home() / ".cache" / "maestro-graph" / "models"
    assert ImageSources.from_env() == ImageSources() and REGISTRY.read() == ""
    assert ServeSettings().api_key_env == API_KEY.name and ServeSettings().api_keys() == ()
    assert (CacheDirOpt.envvar, CacheDirOpt.default) == (CACHE_DIR.name, Path(CACHE_DIR.default))
    assert (CacheTtlOpt.envvar, CacheTtlOpt.default, str(DEFAULT_TTL_S)) == (CACHE_TTL_S.name, DEFAULT_TTL_S,
                                                                              CACHE_TTL_S.default)

    monkeypatch.setenv(POLICIES.name, "rules,random")
    monkeypatch.setenv(POLICY.name, "random")
    monkeypatch.setenv(IMAGE_DIRS.name, str(tmp_path))
    monkeypatch.setenv(IMAGE_HOSTS.name, "Example.org:8080")
    monkeypatch.setenv(MODELS_DIR.name, str(tmp_path / "models"))
    monkeypatch.setenv(DEVICE.name, "cpu")
    monkeypatch.setenv(API_KEY.name, "a, b")
    catalog = PolicyCatalog.from_env()
    assert catalog.names == ("rules", "random") and catalog.get().name == "random"
    sources = ImageSources.from_env()
    assert sources.allowed_dirs == (tmp_path,) and sources.allowed_hosts == ("example.org:8080",)
    assert models_dir() == tmp_path / "models" and default_device() == "cpu"
    assert ServeSettings().api_keys() == ("a", "b")
    assert ImageSources.from_env({}) == ImageSources()  # a mapping given is read instead of the process's


def test_process_defaults_leave_the_users_values(monkeypatch):
    for variable in (OMP_NUM_THREADS, HF_HUB_OFFLINE, TOKENIZERS_PARALLELISM):
        monkeypatch.delenv(variable.name, raising=False)
    monkeypatch.setenv(OMP_NUM_THREADS.name, "4")
    set_process_defaults()
    assert (OMP_NUM_THREADS.read(), HF_HUB_OFFLINE.read(), TOKENIZERS_PARALLELISM.read()) == ("4", "1", "false")
    assert present([OMP_NUM_THREADS.name, "MAESTRO_NOT_SET_ANYWHERE"]) == {OMP_NUM_THREADS.name: "4"}


def test_a_variable_set_for_a_block_is_gone_after_it(monkeypatch):
    monkeypatch.delenv(SUITE_OWNER_KEYS.name, raising=False)
    monkeypatch.setenv(TRUST_SUITE_UNSET_KEY.name, "k")
    TRUST_SUITE_UNSET_KEY.unset()
    assert TRUST_SUITE_UNSET_KEY.name not in present([TRUST_SUITE_UNSET_KEY.name])
    try:
        with SUITE_OWNER_KEYS.set_while("a,b"):
            assert SUITE_OWNER_KEYS.read() == "a,b"
            raise RuntimeError("the block failed")
    except RuntimeError:
        pass
    assert present([SUITE_OWNER_KEYS.name]) == {}
