"""Tier-2 zoom: crop, tile and upscale views of an image, each remembering where it came from.

OCR engines miss text that is only a few pixels high in a big image (detectors resize the whole image to a fixed
side). Cutting the image into tiles and enlarging them gives the detector readable text; the view's offset and
scale then map every box back to the source image so the caller can merge results from several views.
"""

from dataclasses import dataclass

from PIL import Image

from maestro_graph.registry.context import SkillContext

MAX_SIDE = 4096  # never produce views larger than this (memory and OCR time grow with the area)
DEFAULT_TILE = 1024
DEFAULT_OVERLAP = 0.15  # fraction of a tile shared with its neighbour, so words on a seam appear whole in one tile


@dataclass(frozen=True)
class View:
    """A piece of the source image: pixel (x, y) of `image` is source pixel (offset + (x, y) / scale)."""

    image: Image.Image
    offset: tuple[int, int]
    scale: float

    def to_source(self, box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        ox, oy = self.offset
        s = self.scale
        return (ox + box[0] / s, oy + box[1] / s, ox + box[2] / s, oy + box[3] / s)


def crop(image: Image.Image, region: tuple[float, float, float, float], pad: float = 0) -> View:
    """The `region` (x0, y0, x1, y1) of `image`, grown by `pad` pixels on each side and clipped to the image."""
    x0 = max(0, int(region[0] - pad))
    y0 = max(0, int(region[1] - pad))
    x1 = min(image.width, int(round(region[2] + pad)))
    y1 = min(image.height, int(round(region[3] + pad)))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"crop region {region} is empty inside a {image.width}x{image.height} image")
    return View(image.crop((x0, y0, x1, y1)), (x0, y0), 1.0)


def upscale(
    image: Image.Image, factor: float | None = None, min_side: int | None = None, max_side: int = MAX_SIDE
) -> View:
    """Resize by `factor`, or so the shorter side reaches `min_side`; the longer side never exceeds `max_side`.
    A factor below 1 shrinks (useful to bring huge scans to a size OCR handles quickly)."""
    if factor is None:
        factor = max(1.0, min_side / min(image.size)) if min_side else 1.0
    if factor <= 0:
        raise ValueError(f"upscale factor must be positive; got {factor}")
    factor = min(factor, max_side / max(image.size))
    if abs(factor - 1.0) < 1e-3:
        return View(image, (0, 0), 1.0)
    size = (max(1, round(image.width * factor)), max(1, round(image.height * factor)))
    return View(image.resize(size, Image.LANCZOS), (0, 0), factor)


def tiles(
    image: Image.Image, tile: int = DEFAULT_TILE, overlap: float = DEFAULT_OVERLAP, factor: float = 1.0
) -> list[View]:
    """Overlapping `tile`-pixel squares covering the image (row by row), each upscaled by `factor`."""
    if tile <= 0 or not 0 <= overlap < 1:
        raise ValueError(f"tiles need tile > 0 and 0 <= overlap < 1; got tile={tile}, overlap={overlap}")

    def starts(length: int) -> list[int]:
        if length <= tile:
            return [0]
        step = max(1, int(tile * (1 - overlap)))
        points = list(range(0, length - tile, step))
        return points + [length - tile]

    views = []
    for y in starts(image.height):
        for x in starts(image.width):
            piece = crop(image, (x, y, min(x + tile, image.width), min(y + tile, image.height)))
            if factor != 1.0:
                big = upscale(piece.image, factor=factor)
                piece = View(big.image, piece.offset, big.scale)
            views.append(piece)
    return views


_OPS = {"crop": crop, "tiles": tiles, "upscale": upscale}


def run(ctx: SkillContext, op: str, image: Image.Image | None = None, **kwargs) -> View | list[View]:
    """`op` is "crop", "tiles" or "upscale"; `image` defaults to the episode's first image; other keyword arguments
    go to the operation (see the functions above)."""
    func = _OPS.get(op)
    if func is None:
        raise ValueError(f"zoom op must be one of {sorted(_OPS)}; got {op!r}")
    return func(ctx.image if image is None else image, **kwargs)
