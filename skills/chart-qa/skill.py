"""Tier-1 chart QA: OCR the chart, lay its text out as axes/labels/legend, read marks by colour, answer."""

from __future__ import annotations

import re

import numpy as np

from maestro_graph.answer_forms import answered_yes_or_no
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

from .chartlib import questions, text
from .chartlib.chart import Chart

_COUNTS_MARKS_RE = re.compile(
    r"\b(?:how many|number of)\s+(?:[\w-]+\s+){0,2}?(?:bars|lines|colou?rs|categories|series|legend (?:entries|items)|"
    r"data points|dots|markers|nodes|edges|wedges|sectors)\b", re.I)
"""Counting the chart's marks ("How many bars are taller than Apples?"): this skill reads values, so it would
answer with a value read for a name the question mentions, never the count. Declined in `run`, not by a `declines`
check: a check that accepts every other question would claim a question asked without an image as one about a
missing picture (maestro_graph/policy/base.py, `_claimed_for_an_image`)."""
COUNTS_MARKS = "the question counts the chart's marks; this skill reads values, it does not count marks"


def run(ctx: SkillContext) -> SkillResult:
    if _COUNTS_MARKS_RE.search(ctx.request):
        return SkillResult(evidence=COUNTS_MARKS, answer=None, confidence=0.0)
    boxes = text.chart_boxes(lambda image: ctx.use("ocr", image=image).boxes, ctx.image)
    chart = Chart(np.asarray(ctx.image.convert("RGB")), boxes)
    # a question that opens like a yes/no one ("Is the value of A higher than that of B?") is a claim to check,
    # as one that says "answer yes or no" is: a value read for it would be no answer
    if answered_yes_or_no(ctx.request, ctx.choices):
        verdict = questions.judge_claim(chart, ctx.request)
    else:
        verdict = questions.answer_open(chart, ctx.request, ctx.choices)
    axes = ", ".join(f"{d}: {len(a.ticks)} ticks" for d, a in chart.axes.items()) or "no numeric axis"
    evidence = f"{verdict.evidence} ({axes}; {len(chart.labels)} data labels)"
    return SkillResult(evidence=evidence, answer=verdict.answer, confidence=verdict.confidence)
