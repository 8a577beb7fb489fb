"""Tier-2 barcode decoding: the model's reads, with boxes in the coordinates of the image passed in."""

from __future__ import annotations

from dataclasses import replace

from PIL import Image

from maestro_graph.experts.protocols import Barcode
from maestro_graph.registry.context import SkillContext


def run(
    ctx: SkillContext, image: Image.Image | None = None, region: tuple[int, int, int, int] | None = None
) -> list[Barcode]:
    """Decode `image` (default: the episode's first image), optionally cropped to `region` (x0, y0, x1, y1)."""
    image = ctx.image if image is None else image
    if region is None:
        return list(ctx.model.decode(image))
    dx, dy = region[0], region[1]
    return [
        replace(b, box=None if b.box is None else (b.box[0] + dx, b.box[1] + dy, b.box[2] + dx, b.box[3] + dy))
        for b in ctx.model.decode(image.crop(region))
    ]
