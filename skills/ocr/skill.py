"""Tier-2 OCR: boxes from the model, grouped into reading-order lines."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from maestro_graph.experts.protocols import TextBox
from maestro_graph.registry.context import SkillContext


@dataclass
class OcrLine:
    boxes: list[TextBox]

    @property
    def text(self) -> str:
        return " ".join(b.text for b in self.boxes)

    @property
    def box(self) -> tuple[float, float, float, float]:
        return (
            min(b.box[0] for b in self.boxes),
            min(b.box[1] for b in self.boxes),
            max(b.box[2] for b in self.boxes),
            max(b.box[3] for b in self.boxes),
        )


@dataclass
class OcrPage:
    boxes: list[TextBox]
    lines: list[OcrLine]
    size: tuple[int, int]

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def reading_order(boxes: list[TextBox], overlap: float = 0.5) -> list[OcrLine]:
    """Group boxes into lines: a box joins a line when it overlaps the line's vertical extent by `overlap`."""
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: b.cy):
        for line in lines:
            top = min(b.box[1] for b in line)
            bottom = max(b.box[3] for b in line)
            inter = min(bottom, box.box[3]) - max(top, box.box[1])
            if inter >= overlap * min(box.height, bottom - top):
                line.append(box)
                break
        else:
            lines.append([box])
    ordered = [OcrLine(sorted(line, key=lambda b: b.box[0])) for line in lines]
    return sorted(ordered, key=lambda line: line.box[1])


def run(
    ctx: SkillContext, image: Image.Image | None = None, region: tuple[int, int, int, int] | None = None
) -> OcrPage:
    """OCR `image` (default: the episode's first image), optionally cropped to `region` (x0, y0, x1, y1).
    Boxes are returned in the coordinates of the image passed in."""
    image = ctx.image if image is None else image
    dx = dy = 0
    if region is not None:
        image = image.crop(region)
        dx, dy = region[0], region[1]
    boxes = ctx.model.ocr(image)
    if dx or dy:
        boxes = [TextBox(b.text, (b.box[0] + dx, b.box[1] + dy, b.box[2] + dx, b.box[3] + dy), b.confidence)
                 for b in boxes]
    return OcrPage(boxes=boxes, lines=reading_order(boxes), size=image.size)
