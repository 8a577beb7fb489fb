"""What every `maestro` command shares: the consoles it prints on, how it reports a user error, and how it opens
the registry and the executor a batch command runs on."""

from __future__ import annotations

import contextlib
import inspect
import re
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ...cache.backends import DEFAULT_TTL_S
from ...core.configs import DEFAULT_WORKER_WAIT_S
from ...core.environment import set_process_defaults
from ...errors import MaestroError

__all__ = ["WIDE_COLUMNS", "console", "err", "executor", "fail", "help_text", "limit_threads", "narrow", "progress",
           "registry"]

console = Console()
err = Console(stderr=True)

WIDE_COLUMNS = 120
"""The terminal width from which the tables a person reads (`skills list`, `registry show`, `eval`'s summary) show
each field in a column of its own; in a narrower terminal (80 columns) they have fewer columns, with the other
fields wrapped beside each row's name, so no text is squeezed to a sliver or cut."""


def narrow() -> bool:
    """Whether the tables a person reads take their narrow form (see WIDE_COLUMNS)."""
    return console.width < WIDE_COLUMNS


def help_text(doc: str) -> str:
    """A command's docstring as its `--help` shows it: each paragraph one line that the terminal wraps at its own
    width, except that an item of a list (a line starting with a digit and a space, or `- `) starts a line. Typer's
    rich help keeps a docstring's source line breaks, so 80 columns showed ragged half-lines; its command list shows
    the first paragraph, so that paragraph is one short sentence."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(re.sub(r"\n(?!\d+ |- )", " ", paragraph) for paragraph in paragraphs)


def print_skipped(problems: list) -> None:
    """Name each task-file line a batch command skipped as bad input (file, line, item id and why) on stderr."""
    for p in problems:
        err.print(f"[yellow]skipped[/yellow] {escape(f'{p.file}:{p.line} ({p.id}): {p.error}')}")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: MESSAGE` on stderr and exit with `code` (2: usage or input error)."""
    # a message's own brackets (`.[ray]`) are text, not markup; one line, whatever the width (the terminal wraps it)
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def progress(message: str) -> contextlib.AbstractContextManager:
    """A spinner on stderr while a slow step runs, only when stderr is a terminal (scripts see nothing)."""
    return err.status(message, spinner="dots") if err.is_terminal else contextlib.nullcontext()


def registry(path: Path | None, cache_dir: Path | None = None, cache_url: str | None = None,
             profiled: bool = True, cache_ttl_s: int = DEFAULT_TTL_S):
    """The registry of `--registry` (default: the packaged one), or a clear error naming what is wrong with it."""
    from ...batch.executors import RegistrySource

    try:
        return RegistrySource(path, cache_dir, cache_url, profiled, cache_ttl_s=cache_ttl_s).load()
    except MaestroError as exc:
        fail(str(exc))


def executor(spec: str, reg, path: Path | None, cache_dir: Path | None, cache_url: str | None,
             workers: int, cache_ttl_s: int = DEFAULT_TTL_S, *, worker_wait_s: float = DEFAULT_WORKER_WAIT_S):
    """The `--executor` of a batch command; Ray workers build their registries from the same files and URLs."""
    from ...batch.executors import RegistrySource, open_executor

    try:
        with progress(f"starting {spec} workers"):
            source = RegistrySource(path, cache_dir, cache_url, cache_ttl_s=cache_ttl_s)
            return open_executor(spec, registry=reg, source=source, workers=workers, worker_wait_s=worker_wait_s)
    except MaestroError as exc:
        fail(str(exc))


def limit_threads() -> None:
    """Two cores are easily oversubscribed by concurrent expert calls: the libraries that load after this (onnxruntime
    through RapidOCR, OpenMP) get one thread each unless the user says otherwise. torch, loaded with this module (the
    reach's question features), keeps one thread per core unless OMP_NUM_THREADS was set before the process started:
    an LM router alone decides faster on both cores (1.3 s against 2.2 s on one), while LM processes run side by side
    need OMP_NUM_THREADS=1 (docs/lm-router.md, "Decision time")."""
    set_process_defaults()
