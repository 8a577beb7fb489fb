"""`maestro registry profile`: measure every pair on a calibration file and write the profile and reach the
policies read."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from .common import console, err, fail
from .common import registry as load_registry
from .options import CacheDirOpt, RegistryOpt, WorkersOpt

__all__ = ["registry_profile"]


def registry_profile(
    tasks: list[Path] = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False,
                                     help="Labelled calibration task file (JSONL), a few items per kind of "
                                          "question (repeat for several files)."),
    registry: Path | None = RegistryOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Profile file to write (default: the one the "
                                       "registry file's `profile:` key names, else <registry>.profile.json next "
                                       "to it)."),
    workers: int = WorkersOpt,
    cache_dir: Path = CacheDirOpt,
) -> None:
    """Run every pair once on a calibration file and write each pair's accuracy and cost.

    The profile is fingerprinted against the registry; the registry file's `profile:` key makes policies read it
    (`Pair.profile`)."""
    from ...batch.measure import measure_pairs
    from ...core.tasks import load_task_files
    from ...registry.config import default_config_path
    from ...registry.reach import reach_path

    reg = load_registry(registry, cache_dir, profiled=False)  # measuring needs no profile, and this writes it
    items, problems = load_task_files(tasks)
    for problem in problems:
        err.print(f"[yellow]skipped[/yellow] {problem.file}:{problem.line}: {problem.error}")
    if not items:
        fail(f"no usable item in {', '.join(map(str, tasks))}")
    config_path = Path(reg.config.source) if reg.config.source != "<memory>" else default_config_path()
    named = reg.config.profile_path()
    target = out or named or config_path.with_name(f"{config_path.stem}.profile.json")
    outcomes = measure_pairs(reg, items, workers=workers)
    profile, reach = outcomes.write_profile(reg, " + ".join(map(str, tasks)), target)
    for entry in profile.pairs:
        family = "unknown" if entry.family_accuracy is None else f"{entry.family_accuracy:.3f}"
        failed = f" ({entry.failures} failed calls left out)" if entry.failures else ""
        console.print(f"{entry.pair}: {entry.accuracy:.3f} on {entry.items} items{failed}, {family} on the "
                      f"{entry.family_items} its family answers, mean cost {entry.mean_cost:g}")
    sources = Table("source", "items", "best single pair", "its accuracy", "oracle (any pair right)",
                    title="per source: what one pair reaches, and what any pair does")
    for row in outcomes.by_source():
        sources.add_row(row.source, str(row.items), row.best_pair, f"{row.best_accuracy:.3f}",
                        f"{row.oracle_accuracy:.3f}")
    if not profile.pairs:  # every pair's calls failed: no figure to show, and nothing a policy should read
        fail(f"no pair was measured; wrote {target} listing them as unmeasured:\n"
             + "\n".join(f"not measured {pair.pair}: {pair.reason}" for pair in profile.unmeasured)
             + "\nmake their endpoints answer and profile again")
    console.print(sources)
    console.print(f"reach: some pair answered {int(reach.answered.sum())} of {len(reach.answered)} items; an episode "
                  f"stops before a call where fewer of the {reach.k} most similar were answered by a pair not yet "
                  f"called than the run context's reach_floor ({reach_path(target)})")
    if named is not None and target.resolve() == named.resolve():
        console.print(f"wrote {target}, the registry file's `profile:`; policies read it from now on")
    else:
        console.print(f"wrote {target}; policies read it once the registry file has `profile: {target.name}` "
                      "(a path relative to the registry file)")
    if profile.unmeasured:
        for pair in profile.unmeasured:
            err.print(f"[red]not measured[/red] {pair.pair}: {escape(pair.reason)}")
        fail(f"{len(profile.unmeasured)} pairs were not measured (their calls failed; no accuracy was written for "
             "them): make their endpoints answer and profile again")
