"""The README is a product page a new user can read, and the documents stay inside the repository: the README is
short and starts with its set-up command, every relative link of the README and of docs/ resolves (file and
heading), nothing points at a folder a clone does not have, and the README's drawing of the graph is the graph's own.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

MAX_LINES = 400
MAX_BYTES = 40_000
FIRST_SCREEN = 40
SETUP_COMMANDS = ("scripts/setup.sh && .venv/bin/maestro ask ", "scripts/setup.sh && .venv/bin/python -m pytest -q -n 2")
OUTSIDE = ("../shared", "DESIGN.md", "STYLE.md")
"""Documents that live beside the repository, not in it: a clone has none of them."""


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are code, not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFC", heading.strip().lower()).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M),
                              flags=re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors


def _links(page: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: are not files


def test_the_readme_is_short():
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines, at most {MAX_LINES}"
    assert len(text.encode()) <= MAX_BYTES, f"README.md has {len(text.encode())} bytes, at most {MAX_BYTES}"


def test_the_setup_commands_are_on_the_first_screen():
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    for command in SETUP_COMMANDS:
        assert command in first, f"README.md's first {FIRST_SCREEN} lines lack `{command}`"
    assert SETUP_COMMANDS[1] in (ROOT / ".ci" / "run").read_text(), ".ci/run no longer runs the README's test command"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_document_points_outside_the_repository(page):
    text = page.read_text()
    assert not [o for o in OUTSIDE if o in text], f"{page.name} names {[o for o in OUTSIDE if o in text]}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    assert not [p.name for p in DOCS if p.resolve() not in linked], "docs pages a README reader cannot find"


def test_no_code_names_a_document_outside_the_repository():
    """Docstrings and comments state contracts or point at docs/, never at a house document a clone lacks."""
    files = [p for folder in ("maestro_graph", "scripts", "tests") for p in (ROOT / folder).rglob("*")
             if p.is_file() and p.suffix in {".py", ".sh", ".md", ".yaml", ".yml", ".toml"}
             and p != Path(__file__).resolve()]
    offenders = [f"{p.relative_to(ROOT)}: {o}" for p in files for o in OUTSIDE + ("/work/shared",)
                 if o in p.read_text(errors="replace")]
    assert not offenders, offenders


def test_the_readme_draws_the_real_graph():
    """The picture on the README is `draw_mermaid()` of the default graph; regenerate it when the graph changes:
    `.venv/bin/python -c "from maestro_graph.episode.graph import build_graph; from maestro_graph.registry import Registry;
    print(build_graph(Registry.load()).get_graph().draw_mermaid())"`."""
    from maestro_graph.episode.graph import build_graph
    from maestro_graph.registry import Registry

    drawn = re.search(r"```mermaid\n(.*?)```", README.read_text(), flags=re.S)
    assert drawn, "README.md has no mermaid drawing of the graph"
    assert drawn.group(1).strip() == build_graph(Registry.load()).get_graph().draw_mermaid().strip()
