"""`maestro reliability`: the expert-fault, bad-input and trust-boundary suites, with their table."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ...backends.packages import missing_package
from ...errors import MaestroError, missing_extra
from .common import console, err, fail, limit_threads

__all__ = ["reliability"]


def reliability(
    out: Path = typer.Option(..., "--out", "-o", help="Folder for reliability.md, reliability.json and the "
                             "registries."),
    episodes: int = typer.Option(200, min=1, help="Episodes per fault scenario."),
    policy: str = typer.Option("rules", "--policy", "-p", help="The policy that runs the episodes."),
    tasks: list[Path] = typer.Option([], "--tasks", "-t", exists=True, dir_okay=False,
                                     help="Task files of fast items (default: the bundled barcode and vision "
                                     "samples)."),
    workers: int = typer.Option(4, min=1, help="Episodes run at once."),
    seed: int = typer.Option(0, help="Seed of the injected faults."),
) -> None:
    """Run the expert-fault, bad-input and trust-boundary suites and write their table.

    The table counts faults survived, inputs rejected, attacks held, episodes completed and lost. Needs the `serve`
    extra (the trust suite attacks a real server). Exits 1 when anything was lost, an input was not handled as
    expected or an attack was not held. A check that cannot run here (LangServe's, without the `langserve` extra) is
    reported as skipped, with the reason, and does not fail the run."""
    limit_threads()
    if (module := missing_package("fastapi", "uvicorn")) is not None:  # the trust suite attacks a real server
        fail(missing_extra("serve", "`maestro reliability`", module))
    from ...operations.reliability.suite import run_reliability
    from ...policy import make_policy

    try:
        make_policy(policy)
    except MaestroError as exc:
        fail(str(exc))
    results = run_reliability(out, episodes=episodes, policy=policy, workers=workers, task_files=list(tasks) or None,
                              seed=seed, progress=lambda m: err.print(f"[dim]{escape(m)}[/dim]"))
    console.print((out / "reliability.md").read_text(), markup=False, soft_wrap=True)  # `[langserve]` is text
    if not results["passed"]:
        raise typer.Exit(1)
