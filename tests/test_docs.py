"""The README is a product page a new user can read, and the documents stay inside the repository: the README is
short and starts with its set-up command, every relative link of the README and of docs/ resolves (file and
heading), nothing points at a folder a clone does not have, and the README's drawing of the graph is the graph's own.
The docs are reference, not a diary: results.md holds the current figures within a page budget, there is no history
page, and neither the docs nor the code's docstrings and comments name the issue or session a change came from.
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
SETUP_COMMANDS = ("scripts/setup.sh && .venv/bin/maestro ask ",
                  "scripts/setup.sh && .venv/bin/python -m pytest -q -n 2")
OUTSIDE = ("../shared", "DESIGN.md", "STYLE.md")
"""Documents that live beside the repository, not in it: a clone has none of them."""
RESULTS = ROOT / "docs" / "results.md"
MAX_RESULTS_LINES = 400
"""results.md holds what the shipped product measures now, each figure with its command; git keeps the rest."""
HISTORY_REFERENCE = re.compile(r"\b(issue|session)s? #?\d+|\b\w+(th|st|nd|rd) session\b", re.I)
""""issue 46", "sessions 3", "fourteenth session": where a change came from, which git records. A GitHub link
(`.../issues/123`) has no space before its number and is not one."""
DOC_REFERENCE = re.compile(r'docs/([\w.-]+\.md),? \(?"([^"]+)"')
"""How a docstring or comment points into a document: `docs/results.md, "Priors in the code"`."""


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
    `.venv/bin/python -c "from maestro_graph.episode.graph import build_graph; from maestro_graph.registry import
    Registry; print(build_graph(Registry.load()).get_graph().draw_mermaid())"`."""
    from maestro_graph.episode.graph import build_graph
    from maestro_graph.registry import Registry

    drawn = re.search(r"```mermaid\n(.*?)```", README.read_text(), flags=re.S)
    assert drawn, "README.md has no mermaid drawing of the graph"
    assert drawn.group(1).strip() == build_graph(Registry.load()).get_graph().draw_mermaid().strip()


def test_results_holds_the_current_figures_within_its_budget():
    lines = len(RESULTS.read_text().splitlines())
    assert lines <= MAX_RESULTS_LINES, (f"docs/results.md has {lines} lines, at most {MAX_RESULTS_LINES}: keep the "
                                        "current figures and their commands, and let git keep superseded ones")


def test_there_is_no_history_page():
    assert not (ROOT / "docs" / "history.md").exists(), "superseded figures live in git, not in docs/history.md"


def _history_references(text: str) -> list[str]:
    return [m.group(0) for m in HISTORY_REFERENCE.finditer(text)]


def test_the_history_pattern_tells_history_from_code():
    assert _history_references("(issue 46, items 1, 2 and 9) the fourteenth session; Issue #58; sessions 3") == [
        "issue 46", "fourteenth session", "Issue #58", "sessions 3"]
    assert not _history_references("https://github.com/o/r/issues/123, an ONNX session, the session's lock, "
                                   "sessions of 2 workers")


def test_no_document_or_code_names_an_issue_or_a_session():
    """Docs and docstrings say what holds and why; which issue or session asked for it is git's to record."""
    files = [*DOCS, README, *(p for folder in ("maestro_graph", "scripts") for p in (ROOT / folder).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {ref}" for p in files for ref in _history_references(p.read_text())]
    assert not found, found


def _lead_ins(page: Path) -> set[str]:
    """A page's headings and the bold lead-ins of its paragraphs (`**Decision time.**`), as a docstring names them."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M)
    return {h.replace("`", "") for h in headings} | set(re.findall(r"\*\*([^*]+?)\.\*\*", text))


def test_every_section_the_code_names_exists():
    """A docstring or comment that points at `docs/X.md, "Section"` names a heading (or bold lead-in) X has now."""
    files = [p for folder in ("maestro_graph", "scripts", "tests", "configs") for p in (ROOT / folder).rglob("*")
             if p.is_file() and p.suffix in {".py", ".sh", ".yaml", ".yml"} and p != Path(__file__).resolve()]
    broken = []
    for path in files:
        for m in DOC_REFERENCE.finditer(path.read_text(errors="replace")):
            page, section = ROOT / "docs" / m.group(1), re.sub(r"\s*\n\s*#?\s*", " ", m.group(2))
            if not page.exists() or section not in _lead_ins(page):
                broken.append(f"{path.relative_to(ROOT)}: docs/{m.group(1)}, {section!r}")
    assert not broken, broken
