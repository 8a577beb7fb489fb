"""Tier-1 chart QA: OCR the chart, lay its text out as axes/labels/legend, read marks by colour, answer."""

from __future__ import annotations

import numpy as np

from maestro_graph.answer_forms import asks_yes_no
from maestro_graph.types import SkillResult

from .chartlib import questions, text
from .chartlib.chart import Chart


def run(ctx) -> SkillResult:
    boxes = text.chart_boxes(lambda image: ctx.use("ocr", image=image).boxes, ctx.image)
    chart = Chart(np.asarray(ctx.image.convert("RGB")), boxes)
    if asks_yes_no(ctx.request, ctx.choices):
        verdict = questions.judge_claim(chart, ctx.request)
    else:
        verdict = questions.answer_open(chart, ctx.request, ctx.choices)
    axes = ", ".join(f"{d}: {len(a.ticks)} ticks" for d, a in chart.axes.items()) or "no numeric axis"
    evidence = f"{verdict.evidence} ({axes}; {len(chart.labels)} data labels)"
    return SkillResult(evidence=evidence, answer=verdict.answer, confidence=verdict.confidence)
