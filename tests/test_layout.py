"""The top level the design card names: `skills/`, `examples/` and `graphs/` are real folders (no symlink into the
package), `langgraph.json` names the `graphs/` modules directly, each one call away from a compiled graph, and the
package finds its skills and examples where the build maps them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from langgraph.graph.state import CompiledStateGraph

from maestro_graph.core.bundled import bundled_dir
from maestro_graph.registry.config import default_config_path, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_top_level_folders_are_real_and_the_package_reads_them():
    for name in ("skills", "examples", "graphs"):
        assert (ROOT / name).is_dir() and not (ROOT / name).is_symlink(), name
    assert not (ROOT / "maestro_graph" / "skills").exists() and not (ROOT / "maestro_graph" / "examples").exists()
    assert bundled_dir("skills") == ROOT / "skills" and bundled_dir("examples") == ROOT / "examples"
    assert load_config(default_config_path()).skill_paths() == [ROOT / "skills"]


def test_langgraph_json_names_graph_modules_that_compile_a_graph_in_one_call():
    graphs = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
    assert set(graphs) == {"maestro", "maestro-agent"}
    for spec in graphs.values():
        path, _, attr = spec.partition(":")
        module = ROOT / path
        assert module.parent == ROOT / "graphs" and attr == "graph", spec
        tree = ast.parse(module.read_text())
        [assign] = [n for n in tree.body if isinstance(n, ast.Assign)]
        assert [t.id for t in assign.targets] == ["graph"] and isinstance(assign.value, ast.Call), spec
        imported = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
        assert imported == {"maestro_graph.doors.agents"}, f"{spec}: a graph module imports the library only"
    namespace: dict = {}
    exec(compile((ROOT / "graphs" / "maestro.py").read_text(), "graphs/maestro.py", "exec"), namespace)
    assert isinstance(namespace["graph"], CompiledStateGraph)
