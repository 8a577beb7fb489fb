"""`maestro export`: recorded episodes as training data for TRL or verl."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

import typer

from ...core.configs import Budget, typer_option
from ...errors import MaestroError
from .common import console, err, fail, limit_threads
from .common import registry as load_registry
from .options import RegistryOpt

__all__ = ["export"]


def export(
    from_: Path = typer.Option(..., "--from", exists=True, dir_okay=False,
                               help="Prediction or rollout file (JSONL) of any policy."),
    tasks: Path = typer.Option(..., "--tasks", "-t", exists=True, dir_okay=False, help="The task file it came from."),
    fmt: str = typer.Option("trl", "--format", "-f", help="trl (JSONL conversational records) | verl (parquet)"),
    out: Path = typer.Option(..., "--out", "-o", help="File to write."),
    registry: Path | None = RegistryOpt,
    max_turns: int = typer_option(Budget, "max_turns", min=1, help="The turn budget the episodes ran with."),
    cost_weight: float = typer.Option(0.0, min=0, help="Reward = score - cost_weight * cost - format_weight * errors."),
    format_weight: float = typer.Option(0.5, min=0),
    tool_calls: bool = typer.Option(False, "--tool-calls", help="TRL: actions as `search` tool calls, not tags."),
    card_chars: int | None = typer.Option(None, min=20, help="Characters of each card description in the prompt "
                                             "(default: the LM router's; use the value `train-lm` trains with: its "
                                             "config's card_chars)."),
    observation_chars: int | None = typer.Option(None, min=20, help="Characters of each observation's evidence "
                                                    "shown (default: the LM router's)."),
    measured: bool = typer.Option(False, "--measured", help="Show each option's measured accuracy on similar "
                                  "questions (the registry's profile), as a router trained with `measured: true` "
                                  "reads its prompt."),
    order: str = typer.Option("registry", "--order", help="How the options are offered, as a router trained with "
                              "this `order` reads its prompt: pair-ids, registry (numbered in the registry's order), "
                              "reach (numbered, best measured on similar questions first), neural or "
                              "neural:PATH.safetensors (numbered by that neural policy's opening choice)."),
) -> None:
    """Export trajectories for TRL or verl: the router conversation from the cards, with the reward and its parts."""
    limit_threads()
    from ...policy.lm import PromptOptions
    from ...policy.lm.policy import make_ranker, order_problem, prompt_order
    from ...training.rl.export import ExportOptions, export_file

    if fmt not in ("trl", "verl"):
        fail(f"unknown format {fmt!r}; use trl or verl")
    problem = order_problem(order, measured)
    if problem:
        fail(f"--order {order!r} {problem}")
    reg = load_registry(registry)
    lengths = {k: v for k, v in (("card_chars", card_chars), ("observation_chars", observation_chars)) if v is not None}
    options = ExportOptions(max_turns=max_turns, cost_weight=cost_weight, format_weight=format_weight,
                            tool_calls=tool_calls, ranker=make_ranker(order),
                            prompt=PromptOptions(order=prompt_order(order), measured=measured, **lengths))
    try:
        count, bad = export_file(from_, tasks, out, cast(Literal["trl", "verl"], fmt), reg, options)
    except MaestroError as exc:
        fail(str(exc))
    for problem in bad:
        err.print(f"[yellow]skipped[/yellow] {problem}")
    console.print(f"exported {count} episodes ({fmt}) -> {out}"
                  + (f"; {len(bad)} unreadable lines skipped" if bad else ""))
