"""Tier-1 text reading: answers "what does the sign say", "what is the title", "what word is at the top", "what is
the number in the image" from OCR lines.

Small text in a large image is lost when the detector shrinks the whole picture, so large images are also read in
overlapping, enlarged tiles (tier-2 `zoom`) and the boxes merged back into source coordinates. The question decides
which lines are meant: a position (top, bottom, left, right), the most prominent line (title), numbers only, one
word, or everything in reading order; with options, the option the text matches best.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from maestro_graph.answer_forms import answered_yes_or_no
from maestro_graph.experts.protocols import TextBox
from maestro_graph.numbers import numbers_in
from maestro_graph.registry.context import SkillContext
from maestro_graph.types import SkillResult

MIN_SIDE = 640  # smaller images are enlarged to this shorter side before OCR
TILE_ABOVE = 1600  # images whose longer side exceeds this are also read tile by tile
TILE = 800  # smallest tile side; larger images get larger tiles so the long side needs at most TILES_PER_SIDE
TILES_PER_SIDE = 3  # caps the OCR calls of the tiled pass at about 3 x 3
TILE_PIXELS = 1600  # tiles are enlarged (never shrunk) to this side so small print reaches a readable height
SAME_BOX_IOU = 0.5  # boxes from overlapping tiles that overlap this much are one piece of text
MAX_ALL_WORDS = 25  # "what does it say" answers with all text only when there is this little of it
EVIDENCE_LINES = 8

_COUNT_RE = re.compile(r"\bhow many\b[^.!?]*(?:\?|$)", re.I)
"""A question that asks how many ("How many words are on the sign?"); not one whose earlier sentence says how many
of something there are ("Some students compared how many clubs they belong to. What is the range of the numbers?")."""
NOT_READING = "the question asks yes or no, or for a count: the text read answers neither"

_POSITIONS = {
    "top": lambda b: b.box[1],
    "bottom": lambda b: -b.box[3],
    "left": lambda b: b.box[0],
    "right": lambda b: -b.box[2],
}


def _iou(a: tuple, b: tuple) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return inter / smaller if smaller > 0 else 0.0


def merge_boxes(groups: list[list[TextBox]]) -> list[TextBox]:
    """Union of boxes from several views; of two boxes covering the same text, the longer, more confident wins."""
    kept: list[TextBox] = []
    for box in sorted((b for g in groups for b in g), key=lambda b: (-len(b.text), -b.confidence)):
        if all(_iou(box.box, k.box) < SAME_BOX_IOU for k in kept):
            kept.append(box)
    return kept


def read_boxes(ctx: SkillContext) -> list[TextBox]:
    """Text boxes of the image in source pixels: one whole-image pass, plus enlarged tiles for large images."""
    image = ctx.image
    whole = ctx.use("zoom", op="upscale", image=image, min_side=MIN_SIDE)
    groups = [[TextBox(b.text, whole.to_source(b.box), b.confidence) for b in ctx.use("ocr", image=whole.image).boxes]]
    if max(image.size) > TILE_ABOVE:
        tile = max(TILE, int(max(image.size) / (TILES_PER_SIDE - 0.5)))
        factor = max(1.0, TILE_PIXELS / tile)
        for view in ctx.use("zoom", op="tiles", image=image, tile=tile, factor=factor):
            page = ctx.use("ocr", image=view.image)
            groups.append([TextBox(b.text, view.to_source(b.box), b.confidence) for b in page.boxes])
    return merge_boxes(groups)


def _lines(boxes: list[TextBox]) -> list[list[TextBox]]:
    """Boxes grouped into reading-order lines (same rule as the OCR skill: shared vertical extent)."""
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: b.cy):
        for line in lines:
            top, bottom = min(b.box[1] for b in line), max(b.box[3] for b in line)
            if min(bottom, box.box[3]) - max(top, box.box[1]) >= 0.5 * min(box.height, bottom - top):
                line.append(box)
                break
        else:
            lines.append([box])
    return [sorted(line, key=lambda b: b.box[0]) for line in sorted(lines, key=lambda ln: min(b.box[1] for b in ln))]


def _text(boxes: list[TextBox]) -> str:
    return " ".join(b.text for b in boxes)


def _similarity(option: str, text: str) -> float:
    """How well an option is found in the text: best fuzzy match against any window of as many words."""
    option_n, words = option.lower().strip(), text.lower().split()
    size = max(1, len(option_n.split()))
    windows = [" ".join(words[i : i + size]) for i in range(max(1, len(words) - size + 1))]
    return max(SequenceMatcher(None, option_n, w).ratio() for w in windows)


def choose(question: str, boxes: list[TextBox], choices: list[str] | None) -> tuple[str, float]:
    """The answer text the question asks for, and a confidence."""
    q = question.lower()
    lines = _lines(boxes)
    if choices:
        text = _text(boxes)
        scored = sorted(((_similarity(c, text), c) for c in choices), reverse=True)
        margin = scored[0][0] - (scored[1][0] if len(scored) > 1 else 0.0)
        return scored[0][1], min(0.9, 0.4 + margin)
    pool = boxes
    if re.search(r"\bnumbers?\b|\bdigits?\b|\bhow much\b|\bprice\b|\byear\b", q):
        numeric = [TextBox(n.text, b.box, b.confidence) for b in boxes for n in numbers_in(b.text)]
        pool = numeric or boxes

    def line_of(box: TextBox) -> str:
        """A number stands alone; a text box brings its whole line."""
        return box.text if pool is not boxes else _text(next(ln for ln in lines if box in ln))

    position = next((p for p in _POSITIONS if re.search(rf"\b{p}(?:most)?\b", q)), None)
    if position:
        return _one_word(line_of(min(pool, key=_POSITIONS[position])), q), 0.6
    if pool is not boxes or re.search(r"\b(?:title|heading|headline|name|brand|largest|biggest)\b", q):
        return _one_word(line_of(max(pool, key=lambda b: (b.height, -b.box[1]))), q), 0.6
    words = sum(len(b.text.split()) for b in boxes)
    if words <= MAX_ALL_WORDS:
        return _one_word(" ".join(_text(ln) for ln in lines), q), 0.55
    tallest = max(b.height for b in boxes)
    prominent = [ln for ln in lines if max(b.height for b in ln) >= 0.8 * tallest]
    return _one_word(" ".join(_text(ln) for ln in prominent), q), 0.35


def _one_word(text: str, question: str) -> str:
    """A question about "the word" gets the longest word of the chosen text, not the whole line."""
    if re.search(r"\bwhat (?:single )?word\b|\bwhich word\b", question) and len(text.split()) > 1:
        return max(text.split(), key=lambda w: sum(ch.isalnum() for ch in w))
    return text


def run(ctx: SkillContext) -> SkillResult:
    # "Is the sign about a sale?" or "How many words are on the sign?" would get the text back: declined before any
    # OCR (with options, the option the text matches is an answer in their form). In code, not by a `declines`
    # check: a check that accepts every other question would claim a question asked without an image as one about
    # a missing picture (maestro_graph/policy/base.py, `_claimed_for_an_image`).
    if not ctx.choices and (answered_yes_or_no(ctx.request, None) or _COUNT_RE.search(ctx.request)):
        return SkillResult(evidence=NOT_READING, answer=None, confidence=0.0)
    boxes = read_boxes(ctx)
    if not boxes:
        return SkillResult(evidence="OCR found no text in the image", answer=None, confidence=0.0)
    lines = _lines(boxes)
    shown = " | ".join(_text(ln) for ln in lines[:EVIDENCE_LINES])
    more = f" (+{len(lines) - EVIDENCE_LINES} more lines)" if len(lines) > EVIDENCE_LINES else ""
    answer, confidence = choose(ctx.request, boxes, ctx.choices)
    return SkillResult(evidence=f"text, top to bottom: {shown}{more}; chosen: {answer!r}", answer=answer,
                       confidence=confidence)
