"""Reading JSON-lines files that may be damaged: task files, prediction records, exported trajectories.

A file is read as bytes and decoded line by line, so one line that is not UTF-8 (or a last line cut inside a
multi-byte character by a killed writer) is one bad line, named by its number, and the lines around it still
load. A UTF-8 byte-order mark before the first line is dropped. Blank lines are skipped.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JsonLine", "read_jsonl"]


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line: its number (from 1) and either its JSON value or why it could not be read."""

    number: int
    value: Any = None
    problem: str | None = None


def read_jsonl(path: str | Path) -> Iterator[JsonLine]:
    with Path(path).open("rb") as fh:
        for number, data in enumerate(fh, start=1):
            if number == 1:
                data = data.removeprefix(codecs.BOM_UTF8)
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield JsonLine(number, problem=f"not valid UTF-8 ({exc.reason} at byte {exc.start + 1} of the line)")
                continue
            if not line.strip():
                continue
            try:
                yield JsonLine(number, json.loads(line))
            except json.JSONDecodeError as exc:
                yield JsonLine(number, problem=f"malformed JSON: {exc}")
