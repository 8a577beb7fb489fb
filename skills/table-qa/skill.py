"""Tier-1 table QA: OCR the table image, rebuild its grid, turn the question into one exact operation over it."""

from __future__ import annotations

from PIL import Image

from maestro_graph.answer_forms import answered_yes_or_no
from maestro_graph.experts.protocols import TextBox
from maestro_graph.registry.context import SkillContext
from maestro_graph.scoring import is_yes_no
from maestro_graph.types import SkillResult

from .tablelib.image import clean_for_ocr, ocr_scale
from .tablelib.layout import Table, build_table, merge_readings
from .tablelib.solve import solve

_EVIDENCE_CHARS = 600  # the table rendering in the evidence is cut to this length


def _read(ctx: SkillContext, image: Image.Image, scale: int) -> list[TextBox]:
    """OCR boxes of `image` (drawn `scale` times larger than the original), in the original's pixels."""
    page = ctx.use("ocr", image=image)
    return [TextBox(b.text, tuple(v / scale for v in b.box), b.confidence) for b in page.boxes]


def read_table(ctx: SkillContext) -> Table:
    """Read the image as it is; when cells come out empty (small digits, white text on colour), also read an
    enlarged, cleaned copy and add what only that reading found."""
    boxes = _read(ctx, ctx.image, 1)
    table = build_table(boxes)
    if table.complete:
        return table
    scale = ocr_scale(ctx.image)
    return build_table(merge_readings(boxes, _read(ctx, clean_for_ocr(ctx.image, scale), scale)))


def run(ctx: SkillContext) -> SkillResult:
    table = read_table(ctx)
    if not table.rows:
        return SkillResult(evidence="no table text found", answer=None, confidence=0.0)
    shown = table.describe()[:_EVIDENCE_CHARS]
    solution = solve(table, ctx.question, ctx.choices)
    if solution is None:
        return SkillResult(evidence=f"table: {shown}; no operation recognised for the question", answer=None,
                           confidence=0.0)
    evidence = f"table: {shown}; operation: {solution.operation}"
    yes_no = answered_yes_or_no(ctx.question, ctx.choices)
    if yes_no and not is_yes_no(solution.answer):
        # "Does a notebook cost more than a pencil?" is solved as a sum of the prices it names: no yes/no answer
        return SkillResult(evidence=f"{evidence}; no yes/no answer to a yes/no question", answer=None,
                           confidence=0.0)
    return SkillResult(evidence=evidence, answer=solution.answer, confidence=solution.confidence)
