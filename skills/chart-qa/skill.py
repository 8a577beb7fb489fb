"""Tier-1 chart QA: OCR the chart, lay its text out as axes/labels/legend, read marks by colour, answer."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from maestro_graph.types import SkillResult

_PACKAGE = "maestro_skill_chart_qa_lib"


def _chartlib(module: str) -> ModuleType:
    """Import a module of the skill's own `chartlib/` package (skill folders are not on sys.path)."""
    if _PACKAGE not in sys.modules:
        folder = Path(__file__).parent / "chartlib"
        spec = importlib.util.spec_from_file_location(_PACKAGE, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{_PACKAGE}.{module}")


def _is_yes_no(question: str, choices: list[str] | None) -> bool:
    if choices:
        return {c.strip().lower() for c in choices} == {"yes", "no"}
    return bool(re.search(r"\byes or no\b|\byes/no\b", question, re.IGNORECASE))


def run(ctx) -> SkillResult:
    chart_mod = _chartlib("chart")
    questions = _chartlib("questions")
    text = _chartlib("text")
    boxes = text.chart_boxes(lambda image: ctx.use("ocr", image=image).boxes, ctx.image)
    chart = chart_mod.Chart(np.asarray(ctx.image.convert("RGB")), boxes)
    if _is_yes_no(ctx.request, ctx.choices):
        verdict = questions.judge_claim(chart, ctx.request)
    else:
        verdict = questions.answer_open(chart, ctx.request, ctx.choices)
    axes = ", ".join(f"{d}: {len(a.ticks)} ticks" for d, a in chart.axes.items()) or "no numeric axis"
    evidence = f"{verdict.evidence} ({axes}; {len(chart.labels)} data labels)"
    return SkillResult(evidence=evidence, answer=verdict.answer, confidence=verdict.confidence)
