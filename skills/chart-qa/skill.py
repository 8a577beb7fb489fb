"""Tier-1 chart QA: OCR the chart, lay its text out as axes/labels/legend, read marks by colour, answer."""

from __future__ import annotations

import re

import numpy as np

from maestro_graph.types import SkillResult

from .chartlib import questions, text
from .chartlib.chart import Chart


def _is_yes_no(question: str, choices: list[str] | None) -> bool:
    if choices:
        return {c.strip().lower() for c in choices} == {"yes", "no"}
    return bool(re.search(r"\byes or no\b|\byes/no\b", question, re.IGNORECASE))


def run(ctx) -> SkillResult:
    boxes = text.chart_boxes(lambda image: ctx.use("ocr", image=image).boxes, ctx.image)
    chart = Chart(np.asarray(ctx.image.convert("RGB")), boxes)
    if _is_yes_no(ctx.request, ctx.choices):
        verdict = questions.judge_claim(chart, ctx.request)
    else:
        verdict = questions.answer_open(chart, ctx.request, ctx.choices)
    axes = ", ".join(f"{d}: {len(a.ticks)} ticks" for d, a in chart.axes.items()) or "no numeric axis"
    evidence = f"{verdict.evidence} ({axes}; {len(chart.labels)} data labels)"
    return SkillResult(evidence=evidence, answer=verdict.answer, confidence=verdict.confidence)
