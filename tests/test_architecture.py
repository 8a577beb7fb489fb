"""The layering of docs/ARCHITECTURE.md, checked on every import of the package (lazy ones inside functions
included): no module imports from a layer above its own, and the top-level modules import one another without
cycles."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "maestro_graph"
LAYERS = [
    {"errors", "types", "scoring", "questions", "answer_form", "choices", "images", "cancellation", "digests", "configs", "memo",
     "jsonl"},
    {"backends", "embeddings", "features", "image_sources", "tasks"},
    {"experts"},
    {"cache"},
    {"registry"},
    {"pair_outcomes", "executors"},
    {"policy"},
    {"graph"},
    {"runner"},
    {"evaluation"},
    {"rl"},
    {"serve", "reliability", "trust_suite", "bench", "graphs", "cli"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
UNLAYERED = {"__init__", "skills", "examples", "checkpoints"}
"""The package's own `__init__` and its data folders (skill code is a plug-in, loaded by path)."""


def _imports() -> set[tuple[str, str, str]]:
    """(importing top-level module, imported top-level module, file) for every import inside the package."""
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] in UNLAYERED:
            continue
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(package)[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [a.name for a in node.names] if not target else []
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("maestro_graph"):
                target = node.module.split(".")[1:]
                names = [a.name for a in node.names] if not target else []
            elif isinstance(node, ast.Import):
                target, names = [], [a.name.split(".")[1] for a in node.names
                                     if a.name.startswith("maestro_graph.")]
            else:
                continue
            for top in ([target[0]] if target else names):
                if top != parts[0] and top not in UNLAYERED:
                    edges.add((parts[0], top, str(path.relative_to(PACKAGE))))
    return edges


def test_every_module_has_a_layer():
    modules = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
               if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file()))}
    assert modules - UNLAYERED - set(LAYER) == set(), "add new modules to docs/ARCHITECTURE.md and LAYERS"


def test_no_upward_imports():
    upward = sorted(f"{file}: {a} (layer {LAYER[a]}) imports {b} (layer {LAYER[b]})"
                    for a, b, file in _imports() if LAYER[b] > LAYER[a])
    assert upward == []


def test_no_import_cycles_between_top_level_modules():
    graph: dict[str, set[str]] = {}
    for a, b, _ in _imports():
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]) if nxt in trail else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []
