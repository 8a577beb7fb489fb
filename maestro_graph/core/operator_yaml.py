"""The one YAML reader of every file an operator writes: registry configs, run configs (`--config`), a trained LM
router's `router.yaml`, an LM policy file and each SKILL.md's front matter.

The operator is trusted, but a file copied from elsewhere or broken by hand must not take a process down: it is
read as data only (YAML's safe loader: plain values, no tags that build Python objects), aliases are refused (a
"billion laughs" bomb expands a few hundred bytes into gigabytes), nesting is capped (8,000 levels made the
composer's recursion overflow the stack), and a file is refused by its size before it is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

__all__ = ["MAX_YAML_BYTES", "MAX_YAML_DEPTH", "parse_yaml", "read_bounded_text", "read_yaml"]

MAX_YAML_BYTES = 1_000_000
"""The largest YAML file read, in bytes (the packaged registry is under 10 KB)."""
MAX_YAML_DEPTH = 64
"""The deepest nesting of mappings and lists read (the packaged files nest at most 5 levels)."""
_SHOWN = 500
"""The most characters of a YAML parser's message that an error quotes."""


class _OperatorLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases and with a cap on nesting, checked as each node is composed."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
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


def parse_yaml(text: str, *, file: str, error: type[ConfigError] = ConfigError) -> Any:
    """The data of a YAML text read from `file`, or `error` naming the file and what is wrong."""
    try:
        return yaml.load(text, Loader=_OperatorLoader)  # noqa: S506 - a SafeLoader without aliases
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
