"""Tier-1 visual question answering: the pair's vision-chat model sees the images and answers, told by this skill's
SKILL.md body. The procedure (what is sent, how the reply is parsed) is the one every skill runs on a vision-chat
model, `ctx.ask()` (registry.vision); this skill only gives it instructions of its own."""

from __future__ import annotations

from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult


def run(ctx: SkillContext) -> SkillResult:
    return ctx.ask()
