"""Tier-2 calculator: one entry point for both `math` methods, so skill code never holds the expert itself."""

from __future__ import annotations

from maestro_graph.errors import SkillError
from maestro_graph.registry.context import SkillContext


def run(ctx: SkillContext, expression: str | None = None, equations: list[str] | None = None,
        unknown: str | None = None) -> str | list[str]:
    """`expression="2*(3+4)"` -> "14"; `equations=["2x+3=11"], unknown="x"` -> ["4"]. Exactly one of the two."""
    if (expression is None) == (equations is None):
        raise SkillError("calculator takes exactly one of expression=... or equations=[...]")
    if expression is not None:
        return ctx.model.evaluate(expression)
    return ctx.model.solve(list(equations), unknown)
