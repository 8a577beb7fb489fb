"""The layering of docs/ARCHITECTURE.md, checked on every import of the package (lazy ones inside functions
included): no module imports from a layer above its own, neither the layers' units nor the modules inside them
import one another in a cycle, the top level holds only the skill API, skills import only the skill API, and no module
or function outgrows the size limits."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "maestro_graph"
LAYERS = [
    {"errors", "types", "numbers", "scoring", "choices", "answer_forms", "digests", "core", "images.load"},
    {"backends", "features", "images.sources"},
    {"experts"},
    {"cache"},
    {"registry"},
    {"batch"},
    {"policy"},
    {"episode"},
    {"training.evaluation"},
    {"training.rl"},
    {"doors.serve", "operations.reliability", "operations.bench", "doors.agents", "doors.cli"},
]
"""A unit is a top-level module, a folder, or (where a folder spans two layers) one module of it."""
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
UNLAYERED = {"__init__", "checkpoints"}
GROUPS = {"doors", "training", "operations"}
"""The folders that group the layers above the core (docs/ARCHITECTURE.md's picture): their units are their
subpackages."""
"""The package's own `__init__` and its data folder (skill code, at the top-level `skills/`, is a plug-in loaded by
path)."""
SKILL_API = {"errors", "types", "numbers", "scoring", "choices", "answer_forms", "digests"}
"""The top-level modules: what skill code imports (beside the experts' result types), kept where they are so that
skills, whose code is fingerprinted into every profile, never change when the package moves."""


def _unit(parts: list[str] | tuple[str, ...]) -> str:
    """The layering unit of a module path inside the package (its longest dotted prefix that has a layer)."""
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYER:
            return ".".join(parts[:n])
    return parts[0]


@functools.cache
def _imported_paths(root: Path, name: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """(importing module's path parts, imported name's path parts) for every import of package `name` under `root`
    (lazy ones inside functions and those only for type checking included): `from .. import x` names module x; a
    class adds a segment no module has. Data folders (UNLAYERED) are left out."""
    found = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[0] in UNLAYERED:
            continue
        package = parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(package)[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == name:
                target = node.module.split(".")[1:]
            elif isinstance(node, ast.Import):
                target = next((a.name.split(".")[1:] for a in node.names if a.name.startswith(name + ".")), [])
            else:
                continue
            for full in ([[*target, a.name] for a in node.names] if isinstance(node, ast.ImportFrom) else [target]):
                if full:
                    found.append((parts, tuple(full)))
    return tuple(found)


def _imports() -> set[tuple[str, str, str]]:
    """(importing unit, imported unit, file) for every import inside the package."""
    edges = set()
    for parts, full in _imported_paths(PACKAGE, "maestro_graph"):
        here, there = _unit(parts), _unit(full)
        if there != here and there not in UNLAYERED:
            edges.add((here, there, "/".join(parts) + ".py"))
    return edges


def module_imports(root: Path, name: str) -> dict[str, set[str]]:
    """Module -> the modules of package `name` (under `root`) it imports; a package is its `__init__`, named by the
    package's dotted path."""
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__").removesuffix("__init__")
               for p in root.rglob("*.py")}

    def module(parts: tuple[str, ...]) -> str | None:
        return next((".".join(parts[:n]) for n in range(len(parts), -1, -1) if ".".join(parts[:n]) in modules), None)

    graph: dict[str, set[str]] = {}
    for parts, full in _imported_paths(root, name):
        here, there = module(parts), module(full)
        if here is not None and there is not None and there != here:
            graph.setdefault(here, set()).add(there)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import cycle found by a depth-first walk, as `a -> b -> a`."""
    state: dict[str, int] = {}
    found = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(" -> ".join(trail[trail.index(nxt):] + [nxt]) if nxt in trail else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_every_module_has_a_layer():
    modules = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
               if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file()))}
    assert modules - UNLAYERED - {unit.split(".")[0] for unit in LAYER} == set(), \
        "add new modules to docs/ARCHITECTURE.md and LAYERS"


def test_top_level_modules_are_the_skill_api():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == SKILL_API | {"__init__"}, "a new module goes into the folder of its layer"


SKILL_IMPORTS = {f"maestro_graph.{name}" for name in SKILL_API} | {"maestro_graph.experts.protocols",
                                                                    "maestro_graph.registry.context"}
"""What skill code may import of the package: the skill API, the experts' contract (their result types and the
vision-cv vocabulary) and the type of the context its `run` is given; the rest (the vision-chat procedure included)
it reaches through that context."""


def _package_imports(path: Path) -> list[str]:
    """Every module of the package a file imports (`from maestro_graph import x` names maestro_graph.x)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "maestro_graph" and not node.level:
            names += [f"maestro_graph.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [name for name in names if name.split(".")[0] == "maestro_graph"]


def test_skills_import_only_the_skill_api_and_the_experts_result_types():
    outside = sorted(f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / "skills").rglob("*.py")
                     for name in _package_imports(path) if name not in SKILL_IMPORTS)
    assert outside == []


def test_no_upward_imports():
    upward = sorted(f"{file}: {a} (layer {LAYER[a]}) imports {b} (layer {LAYER[b]})"
                    for a, b, file in _imports() if LAYER[b] > LAYER[a])
    assert upward == []


def test_no_import_cycles_between_units():
    graph: dict[str, set[str]] = {}
    for a, b, _ in _imports():
        graph.setdefault(a, set()).add(b)
    assert cycles(graph) == []


def test_no_import_cycles_between_modules():
    """Inside a folder too: no module imports, even lazily or for type checking, a module that imports it back."""
    assert cycles(module_imports(PACKAGE, "maestro_graph")) == []


def _package(folder: Path, back_edge: bool) -> Path:
    """A package `pkg` whose module `a` imports `inner` lazily inside a function, whose `__init__` imports `inner.b`;
    with `back_edge`, `inner.b` imports `a` back, only for type checking."""
    package = folder / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from .b import B\n")
    (package / "a.py").write_text("def f():\n    from .inner import B\n    return B\n")
    back = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.a import f\n\n" if back_edge else ""
    (package / "inner" / "b.py").write_text(back + "class B: ...\n")
    return package


def test_the_module_cycle_check_finds_a_cycle(tmp_path):
    """The test of the test: a cycle through a lazy import, a package's `__init__` and an import for type checking
    only is caught; the same package without the back edge is not."""
    assert cycles(module_imports(_package(tmp_path / "cyclic", True), "pkg")) == ["a -> inner -> inner.b -> a"]
    acyclic = module_imports(_package(tmp_path / "acyclic", False), "pkg")
    assert acyclic == {"a": {"inner"}, "inner": {"inner.b"}} and cycles(acyclic) == []


def test_importing_the_policies_loads_no_expert():
    """A policy sees cards, skills and what was measured of pairs, never an expert: importing every policy module
    (the LM router's included) loads no expert, cache or batch module, so the rule holds at run time too."""
    import subprocess
    import sys

    modules = sorted("maestro_graph." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
                     for p in (PACKAGE / "policy").rglob("*.py"))
    probe = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
             "print(sorted(m for m in sys.modules if m.startswith(('maestro_graph.experts', 'maestro_graph.cache', "
             "'maestro_graph.batch', 'maestro_graph.registry.handles', 'maestro_graph.registry.registry'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
SIZED = ("maestro_graph", "graphs", "skills", "scripts")
"""The folders whose Python modules the size limits hold for (at the top of the repository)."""
def longer_modules(architecture: str) -> dict[str, str]:
    """The modules allowed more than MAX_MODULE_LINES, each with its reason, as docs/ARCHITECTURE.md's "Size
    limits" section lists them (`- `path`: reason`), so that the reason lives where readers look."""
    section = architecture.partition("\n## Size limits\n")[2].partition("\n## ")[0]
    return dict(re.findall(r"^- `([^`]+)`: (\S.*)$", section, flags=re.MULTILINE))


def oversized(root: Path, folders: tuple[str, ...], allowed: dict[str, str]) -> list[str]:
    """Every module of `folders` (under `root`) over MAX_MODULE_LINES that `allowed` does not name, every function
    or method over MAX_FUNCTION_LINES (from its `def` to its last line, nested functions counted in their own and
    in the enclosing one), and every entry of `allowed` that names no module over the limit."""
    found = []
    for path in sorted(p for folder in folders for p in (root / folder).rglob("*.py")):
        name, text = path.relative_to(root).as_posix(), path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and name not in allowed:
            found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES}, unless docs/ARCHITECTURE.md says why)")
        elif name in allowed and lines <= MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines, within the limit: take it off docs/ARCHITECTURE.md's list")
        found += [f"{name}:{node.lineno} {node.name}(): {node.end_lineno - node.lineno + 1} lines "
                  f"(at most {MAX_FUNCTION_LINES})" for node in ast.walk(ast.parse(text))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    return found + [f"{name}: named in docs/ARCHITECTURE.md's list, but no such module" for name in sorted(allowed)
                    if not (root / name).is_file()]


def test_no_module_or_function_outgrows_its_limit():
    """A module over 500 lines holds more than one job, and a function over 80 cannot be read on one screen."""
    found = oversized(ROOT, SIZED, longer_modules((ROOT / "docs" / "ARCHITECTURE.md").read_text()))
    assert found == []


def test_the_size_check_finds_a_long_module_and_a_long_function(tmp_path):
    """The test of the test: a module over the limit is caught unless the doc's list names it with a reason; a
    function over the limit is caught, nested or not, even in a listed module; a stale list entry is caught."""
    def function(name: str, body_lines: int, indent: str = "") -> str:
        return f"{indent}def {name}():\n" + f"{indent}    x = 1\n" * body_lines

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text(function("fits", MAX_FUNCTION_LINES - 1)
                                               + "class C:\n" + function("method", MAX_FUNCTION_LINES, "    "))
    doc = ("# Architecture\n\n## Size limits\n\nAllowed more:\n\n- `pkg/sub/long.py`: a generated table\n"
           "- `pkg/gone.py`: an old reason\n\n## Next\n\n- `pkg/other.py`: not in the section\n")
    assert longer_modules(doc) == {"pkg/sub/long.py": "a generated table", "pkg/gone.py": "an old reason"}
    assert oversized(tmp_path, ("pkg",), {}) == [
        f"pkg/short.py:{MAX_FUNCTION_LINES + 2} method(): {MAX_FUNCTION_LINES + 1} lines (at most 80)",
        f"pkg/sub/long.py: {MAX_MODULE_LINES + 1} lines (at most 500, unless docs/ARCHITECTURE.md says why)"]
    assert oversized(tmp_path, ("pkg",), longer_modules(doc)) == [
        f"pkg/short.py:{MAX_FUNCTION_LINES + 2} method(): {MAX_FUNCTION_LINES + 1} lines (at most 80)",
        "pkg/gone.py: named in docs/ARCHITECTURE.md's list, but no such module"]
    (tmp_path / "pkg" / "short.py").write_text("def outer():\n" + function("inner", MAX_FUNCTION_LINES, "    "))
    assert [f.split(" ")[1] for f in oversized(tmp_path, ("pkg",), longer_modules(doc))
            if f.startswith("pkg/short.py")] == ["outer():", "inner():"]


def test_the_path_of_a_question_names_files_that_exist():
    """docs/ARCHITECTURE.md walks a question from `langgraph.json` to its answer in at most ten files, one to a step;
    a file moved or renamed without the walk following is caught here."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("\n## The path of a question\n", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. `([^`]+)`", section, re.M)
    named = re.findall(r"`((?:maestro_graph|graphs|skills)/[\w./-]+\.py)`", section)
    assert 0 < len(steps) <= 10 and set(steps) <= set(named)
    assert [path for path in named if not (ROOT / path).is_file()] == []


def test_the_package_docstring_places_every_subpackage_once():
    """The package's docstring sorts its subpackages by role (the core, beneath it, the doors, training, operations),
    so a newcomer opening `maestro_graph/` sees the core apart; a new subpackage must be given a place there."""
    import maestro_graph

    roles = "\n".join(block for block in maestro_graph.__doc__.split("\n\n") if block.startswith("- "))
    names = re.findall(r"`(\w+)`(?: \(|[,;.:])", roles)  # a name, then what it holds, the next name or its members
    top = [p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    grouped = [p for group in top if group.name in GROUPS for p in group.iterdir() if (p / "__init__.py").is_file()]
    assert {group.name for group in top} >= GROUPS
    assert sorted(names) == sorted(p.name for p in top + grouped)
