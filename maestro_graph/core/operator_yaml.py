"""The one YAML reader of every file an operator writes: registry configs, run configs (`--config`), a trained LM
router's `router.yaml`, an LM policy file and each SKILL.md's front matter.

The operator is trusted, but a file copied from elsewhere or broken by hand must not take a process down: it is
read as data only (YAML's safe loader: plain values, no tags that build Python objects), nesting is capped (8,000
levels made the composer's recursion overflow the stack), a file is refused by its size before it is read, and
aliases may not expand it past `MAX_YAML_NODES` values (a "billion laughs" bomb expands a few hundred bytes into
billions; `yaml.safe_dump` itself writes aliases for a value used twice, so they are not refused outright, except
in SKILL.md front matter, which has no use for them: `parse_yaml(..., aliases=False)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

__all__ = ["MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "parse_yaml", "read_bounded_text", "read_yaml"]

MAX_YAML_BYTES = 1_000_000
"""The largest YAML file read, in bytes (the packaged registry is under 10 KB)."""
MAX_YAML_DEPTH = 64
"""The deepest nesting of mappings and lists read (the packaged files nest at most 5 levels)."""
MAX_YAML_NODES = 100_000
"""The most values (mappings, lists and scalars) a YAML file may hold once its aliases are expanded (the packaged
registry holds about 400)."""
_SHOWN = 500
"""The most characters of a YAML parser's message that an error quotes."""


class _OperatorLoader(yaml.SafeLoader):
    """YAML's safe loader with a cap on nesting, checked as each node is composed, and on the size of the document
    once its aliases are expanded (`aliases=False`: no aliases at all)."""

    aliases = True

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if not self.aliases and self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed",
                                              event.start_mark)
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_YAML_DEPTH} levels deep "
                                              "(MAX_YAML_DEPTH)", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None:
            _check_expanded(node)
        return node


class _NoAliasLoader(_OperatorLoader):
    aliases = False


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expanded(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it past MAX_YAML_NODES values, or that contains itself, without
    expanding it: each node's expanded size is counted once (depth first, without recursion)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            open_nodes.discard(key)
            if sizes[key] > MAX_YAML_NODES:
                raise yaml.composer.ComposerError(None, None, f"its aliases expand it to more than {MAX_YAML_NODES:,} "
                                                  "values (MAX_YAML_NODES): an alias bomb", node.start_mark)
        elif key in open_nodes:  # met again inside itself
            raise yaml.composer.ComposerError(None, None, "an alias refers to a value that contains it",
                                              node.start_mark)
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def parse_yaml(text: str, *, file: str, error: type[ConfigError] = ConfigError, aliases: bool = True) -> Any:
    """The data of a YAML text read from `file`, or `error` naming the file and what is wrong."""
    try:
        return yaml.load(text, Loader=_OperatorLoader if aliases else _NoAliasLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise error(f"not valid YAML: {_one_line(exc)}", file=file) from None


def _one_line(exc: yaml.YAMLError) -> str:
    """A parser's message on one line with where it happened (its own spans several lines, quoting the text)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None:
        return " ".join(str(exc).split())[:_SHOWN]
    where = f" (line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1})" if exc.problem_mark else ""
    context = f"{exc.context}: " if exc.context else ""
    return f"{context}{exc.problem}"[:_SHOWN] + where


def read_bounded_text(path: str | Path, *, limit: int, limit_name: str,
                      error: type[ConfigError] = ConfigError) -> str:
    """A text file's content, refused by its size before it is read when it has more than `limit` bytes (the
    error names `limit_name`, the constant that sets it); no more than `limit` bytes are ever read."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            size = path.stat().st_size
            data = fh.read(limit + 1) if size <= limit else b""
    except OSError as exc:
        raise error(f"cannot be read ({exc.strerror or exc})", file=str(path)) from None
    if size > limit or len(data) > limit:
        raise error(f"the file has {max(size, len(data)):,} bytes, above the cap of {limit:,} ({limit_name})",
                    file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=str(path)) from None


def read_yaml(path: str | Path, *, error: type[ConfigError] = ConfigError) -> Any:
    """The data of an operator's YAML file (at most `MAX_YAML_BYTES`), or `error` naming the file."""
    return parse_yaml(read_bounded_text(path, limit=MAX_YAML_BYTES, limit_name="MAX_YAML_BYTES", error=error),
                      file=str(path), error=error)
