"""`maestro skills list` and `maestro registry show`: what the registry holds, as tables that fit the terminal
(see WIDE_COLUMNS) or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from .common import console, narrow
from .common import registry as load_registry
from .options import RegistryOpt

__all__ = ["registry_show", "skills_list"]

JsonOpt = typer.Option(False, "--json", help="Print as JSON.")


def skills_list(registry: Path | None = RegistryOpt, as_json: bool = JsonOpt) -> None:
    """List the skills found in the registry's skill folders, each with whether a model here can run it.

    Where none can: why, and how to add one."""
    skills = sorted(load_registry(registry).describe()["skills"], key=lambda s: (s["tier"], s["name"]))
    if as_json:
        print(json.dumps(skills, indent=2, ensure_ascii=False))
        return
    console.print(_skills_table(skills))


def registry_show(registry: Path | None = RegistryOpt, as_json: bool = JsonOpt) -> None:
    """Show the models (with availability and the reason when unavailable), skills and compatible pairs."""
    info = load_registry(registry).describe()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    console.print(_models_table(info["models"], f"models ({info['config']})"))
    console.print(_skills_table(info["skills"]))
    console.print(f"[bold]{len(info['pairs'])} pairs:[/bold] " + ", ".join(info["pairs"]))


def _models_table(models: list[dict], title: str) -> Table:
    """Each model with its capabilities, backend, cost and availability (where unavailable: why, and the command
    that adds it); in a narrow terminal those fields are wrapped beside the model's name."""
    thin = narrow()
    if thin:
        table = Table("model", "capabilities, backend, cost/call; available", title=title, box=box.SIMPLE_HEAD,
                      show_lines=True)
        table.columns[1].overflow = "fold"  # a long word (a path, a package) wraps; nothing is cut
    else:
        table = Table("model", "capabilities", "backend", "cost/call", "available", title=title)
    for m in models:
        available = "yes" if m["available"] else f"[red]no[/red]: {escape(m['reason'])}"
        install = f"to add it: {escape(m['install'])}" if not m["available"] and m["install"] else ""
        fields = (", ".join(m["capabilities"]), m["backend"], f"{m['cost_per_call']:g}")
        if thin:
            table.add_row(m["name"], "; ".join(escape(f) for f in fields)
                          + ("; available: yes" if m["available"] else f"\navailable: {available}")
                          + (f"\n{install}" if install else ""))
        else:
            table.add_row(m["name"], *map(escape, fields), available + (f"; {install}" if install else ""))
    return table


def _skills_table(skills: list[dict]) -> Table:
    """Whole descriptions: the table wraps them at word boundaries rather than cutting them (in a narrow terminal,
    under the skill's tier, requirements and availability, beside its name)."""
    title = f"skills ({len(skills)})"
    rows = [(spec["name"], str(spec["tier"]), " | ".join(filter(None, (", ".join(spec["requires"]),
                                                                      ", ".join(spec.get("or_requires", []))))),
             "yes" if spec["available"] else f"[red]no[/red]: {escape(spec['reason'])}", escape(spec["description"]))
             for spec in skills]
    if narrow():
        table = Table("skill", "tier, requires, available; description", title=title, box=box.SIMPLE_HEAD,
                      show_lines=True)
        for name, tier, requires, available, description in rows:
            table.add_row(name, f"tier {tier}, requires {escape(requires)}, available: {available}\n{description}")
        return table
    table = Table("skill", "tier", "requires", "available", "description", title=title)
    for name, tier, requires, available, description in rows:
        table.add_row(name, tier, escape(requires), available, description)
    return table
