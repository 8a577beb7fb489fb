"""Tier-2 shape detection: every shape of a named kind (and colour), through the pair's `vision-cv` model."""

from __future__ import annotations

from PIL import Image

from maestro_graph.experts.protocols import COLOR_NAMES, POLYGON_SIDES, SHAPE_NAMES, shape_kind
from maestro_graph.registry.context import SkillContext


def run(ctx: SkillContext, shape: str, image: Image.Image | None = None, color: str | None = None) -> list:
    """Shapes of kind `shape` ("circles", "pentagon", ...) in `image` (default: the episode's first image), only of
    `color` when given. Circles come back as `Circle`, polygons as `Polygon` (maestro_graph.experts.opencv_vision).
    A shape or colour name outside the vocabulary is the caller's mistake: ValueError naming the accepted ones."""
    kind = shape_kind(shape)
    if kind is None:
        raise ValueError(f"shapes: unknown shape {shape!r}; expected one of {', '.join(SHAPE_NAMES)} (or plurals)")
    if color is not None and color not in COLOR_NAMES:
        raise ValueError(f"shapes: unknown colour {color!r}; expected one of {', '.join(COLOR_NAMES)}")
    image = ctx.image if image is None else image
    if kind == "circle":
        return ctx.model.circles(image, color=color)
    return ctx.model.polygons(image, POLYGON_SIDES[kind], color=color)
