"""`maestro bench`: make the procedural suite and check a written one. Mounted by the main CLI as a sub-app."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from ...core.environment import OMP_NUM_THREADS

__all__ = ["bench_app"]

bench_app = typer.Typer(help="Procedural benchmark suite: make it, check it.", no_args_is_help=True)
_console = Console()
_err = Console(stderr=True)


@bench_app.command("make")
def make(
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write train/val/test.jsonl and images/ into."),
    n: int = typer.Option(..., "--n", min=1, help="Items per split."),
    seed: int = typer.Option(0, "--seed", "-s", min=0, help="Suite seed: the same seed gives the same bytes."),
    domains: list[str] | None = typer.Option(None, "--domains", "-d",
                                                help="Only these domains (repeat, or comma-separated)."),
    force: bool = typer.Option(False, "--force", help="Overwrite a folder that already holds a suite."),
) -> None:
    """Generate N items per split (train, val, test; no item drawn twice in the suite) with exact answers."""
    OMP_NUM_THREADS.set_default("1")
    from .generate import DOMAINS, make_suite

    names = [d.strip() for value in (domains or []) for d in value.split(",") if d.strip()] or list(DOMAINS)
    unknown = [d for d in names if d not in DOMAINS]
    if unknown:
        _err.print(f"[red]error:[/red] unknown domain(s) {', '.join(unknown)}; valid: {', '.join(DOMAINS)}")
        raise typer.Exit(2)
    if (out / "train.jsonl").exists() and not force:
        _err.print(f"[red]error:[/red] {out} already holds a suite; pass --force to overwrite it")
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    counts = make_suite(out, n, seed, domains=names)
    _console.print(f"wrote {', '.join(f'{k}: {v}' for k, v in counts.items())} items "
                   f"({len(names)} domains) to {out}")


@bench_app.command("check")
def check(
    folder: Path = typer.Argument(..., exists=True, file_okay=False, help="A folder written by `bench make`."),
    fast: bool = typer.Option(False, "--fast", help="Validate formats and seeds only; do not re-derive items."),
) -> None:
    """Re-derive every item from its seed and confirm its stored question, answer and images; exit 1 on problems."""
    OMP_NUM_THREADS.set_default("1")
    from .generate import check_suite

    report = check_suite(folder, regenerate=not fast)
    for problem in report.problems:
        _err.print(f"[red]problem:[/red] {problem}")
    _console.print(f"{report.items} items ({', '.join(f'{k}: {v}' for k, v in report.per_split.items())}), "
                   f"{report.regenerated} re-derived and identical, {len(report.problems)} problems")
    if not report.ok:
        raise typer.Exit(1)
