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
    IMAGE_DIRS,
    IMAGE_HOSTS,
    MODELS_DIR,
    POLICIES,
    POLICY,
    REGISTRY,
)

ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"MAESTRO_[A-Z0-9_]+")


def test_docs_table_is_the_modules():
    assert environment.table() in (ROOT / "docs" / "environment.md").read_text()


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


def test_each_variable_does_what_its_row_says(monkeypatch, tmp_path):
    from maestro_graph.backends.hf import default_device, models_dir
    from maestro_graph.cache.backends import DEFAULT_TTL_S
    from maestro_graph.cli.options import CacheDirOpt, CacheTtlOpt
    from maestro_graph.images.sources import ImageSources
    from maestro_graph.policy import PolicyCatalog
    from maestro_graph.serve.settings import ServeSettings

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
