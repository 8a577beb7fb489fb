"""`maestro settings`: every setting a run reads, with its value and where it came from, in one place: the
environment variables (`core.environment`), an episode's budget, the server's settings and the trainers' configs
(each declared once, `core.configs`), with `--config` a YAML file as that command's `--config` reads it."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from .common import fail

__all__ = ["settings"]


class Section(StrEnum):
    environment = "environment"
    budget = "budget"
    serve = "serve"
    train = "train"
    train_lm = "train-lm"


SECRET = "(set; not shown)"
"""What the table prints for a variable that holds keys (`MAESTRO_API_KEY` and the like)."""


def _config_class(section: Section) -> type:
    from ...core.configs import Budget
    from ...training.rl.config import LMTrainConfig, NeuralGRPOConfig
    from ..serve.settings import ServeSettings

    return {Section.budget: Budget, Section.serve: ServeSettings, Section.train: NeuralGRPOConfig,
            Section.train_lm: LMTrainConfig}[section]


def _rows(section: Section, config: Path | None) -> list[dict[str, Any]]:
    from ...core.configs import setting_values
    from ...core.environment import sources
    from ...errors import ConfigError

    if section is Section.environment:
        return [{"setting": var.name, "value": SECRET if value and var.name.endswith(("_KEY", "_KEYS")) else value,
                 "source": source} for var, value, source in sources()]
    try:
        values = setting_values(_config_class(section), config)
    except ConfigError as exc:
        fail(str(exc))
    return [{"setting": v.name, "value": list(v.value) if isinstance(v.value, tuple) else v.value,
             "source": v.source} for v in values]


def settings(
    section: list[Section] | None = typer.Argument(
        None, help="Which settings: environment, budget, serve, train, train-lm (default: all of them)."),
    config: Path | None = typer.Option(None, "--config", exists=True, dir_okay=False,
                                       help="A YAML file as `maestro serve`, `train` or `train-lm` reads it with "
                                            "--config: its values, checked, with the file as their source (name "
                                            "that one section)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: section -> rows."),
) -> None:
    """Print every setting a run reads, with its value and where it came from.

    The source is `environment` (a variable set in this process), the YAML file given, or `default`. Flags given
    to a command win over both; this shows what a run gets without them."""
    chosen = section or list(Section)
    if config is not None and (len(chosen) != 1 or chosen[0] in (Section.environment, Section.budget)):
        fail("--config reads the YAML file of one command's settings: name one of serve, train, train-lm "
             f"(got {', '.join(s.value for s in chosen)})")
    tables = {s.value: _rows(s, config) for s in chosen}
    if as_json:
        print(json.dumps(tables, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, rows in tables.items():
        table = Table(title=name, title_justify="left")
        for column in ("setting", "value", "source"):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(row["setting"], "" if row["value"] is None else str(row["value"]), row["source"])
        console.print(table)
