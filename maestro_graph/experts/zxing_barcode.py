"""zxing-cpp barcode reader (1D and 2D codes) with a try-harder cascade for blurred, small or low-contrast photos.

zxing-cpp already tries rotations, inversion and downscaling in one pass. Photographed codes still fail it when they
are small (modules under ~2 px), blurred or unevenly lit, so when the first pass finds nothing the expert re-reads
preprocessed copies (see `image_variants`) and stops at the first copy that decodes. EAN/UPC symbols read without a
2/5-digit add-on are re-read the same way, and an add-on is kept only when the main code it extends equals the first
read (two agreeing reads), because a lone add-on read on a sharpened copy can be wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image, ImageFilter

from ..backends.packages import missing_package
from .protocols import Barcode

__all__ = ["ZXingBarcodeExpert", "Variant", "image_variants"]

_NO_ADDON = "]E0"
"""AIM symbology identifier of an EAN/UPC read without add-on (`]E3` is one with its add-on)."""
_ADDON_LENGTHS = (2, 5)

Point = tuple[float, float]


@dataclass(frozen=True)
class Variant:
    """A preprocessed copy of the image and how to map its pixel coordinates back to the original's."""

    name: str
    image: Image.Image
    to_original: Callable[[Point], Point]


def _scaled(name: str, image: Image.Image, factor: float, resample: int = Image.Resampling.BICUBIC) -> Variant:
    size = (max(1, round(image.width * factor)), max(1, round(image.height * factor)))
    return Variant(name, image.resize(size, resample), lambda p: (p[0] / factor, p[1] / factor))


def _rotated(image: Image.Image, degrees: float) -> Variant:
    """PIL turns counter-clockwise about the centre and grows the canvas; the inverse turn maps points back."""
    turned = image.rotate(degrees, expand=True, fillcolor=255)
    a = math.radians(degrees)
    cx, cy, nx, ny = image.width / 2, image.height / 2, turned.width / 2, turned.height / 2

    def back(p: Point) -> Point:
        dx, dy = p[0] - nx, p[1] - ny
        return (cx + dx * math.cos(a) - dy * math.sin(a), cy + dx * math.sin(a) + dy * math.cos(a))

    return Variant(f"rotate-{degrees:g}", turned, back)


def _same(image: Image.Image, name: str) -> Variant:
    return Variant(name, image, lambda p: p)


def _odd(n: int) -> int:
    return n if n % 2 else n + 1


def image_variants(gray: Image.Image, max_side: int) -> Iterator[Variant]:
    """Preprocessed copies of a greyscale image for a second read, in the order that decoded most photographed EAN,
    UPC, QR and Data Matrix codes soonest: upscaled (small modules), contrast-equalised (CLAHE, uneven light),
    adaptively thresholded (blur and shadows), upscaled and sharpened (blur), turned 45° (skewed codes)."""
    import cv2

    if max(gray.size) * 2 <= max_side:
        yield _scaled("upscale-2x", gray, 2.0)
    pixels = np.asarray(gray)
    yield _same(Image.fromarray(cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8)).apply(pixels)), "clahe")
    block = _odd(max(31, min(gray.size) // 4))
    thresholded = cv2.adaptiveThreshold(pixels, 255, cv2.ADAPTIVE_THRESH_GAUSSIAN_C, cv2.THRESH_BINARY, block, 5)
    yield _same(Image.fromarray(thresholded), "adaptive-threshold")
    factor = 1.5 if max(gray.size) * 1.5 <= max_side else 1.0
    sharp = _scaled("sharpen", gray, factor)
    yield replace(sharp, image=sharp.image.filter(ImageFilter.UnsharpMask(radius=2, percent=300, threshold=0)))
    yield _rotated(gray, 45)


def read_with_variants(image: Image.Image, read: Callable[[Variant], list[Barcode]], *, max_side: int,
                       try_harder: bool) -> list[Barcode]:
    """Greyscale `image` (shrunk to `max_side`) read once, then, if nothing was found and `try_harder`, re-read on
    each `image_variants` copy until one finds something; boxes are in the original image's pixels. The retry
    strategy of the readers that take no second-pass options of their own (OpenCV, ZBar)."""
    gray = image.convert("L")
    factor = min(1.0, max_side / max(gray.size))
    base = Variant("original", gray, lambda p: p)
    if factor < 1.0:
        size = (round(gray.width * factor), round(gray.height * factor))
        base = Variant("original", gray.resize(size, Image.Resampling.LANCZOS),
                       lambda p: (p[0] / factor, p[1] / factor))
    found = read(base)
    if found or not try_harder:
        return found
    for variant in image_variants(base.image, max_side):
        def to_original(p: Point, v: Variant = variant) -> Point:
            return base.to_original(v.to_original(p))

        found = read(Variant(variant.name, variant.image, to_original))
        if found:
            return found
    return []


@dataclass(frozen=True)
class _Read:
    barcode: Barcode
    symbology: str  # AIM identifier, e.g. "]Q1", "]E0"


class ZXingBarcodeExpert:
    """Decodes every barcode in an image. `try_harder=False` keeps only zxing-cpp's own single pass; images larger
    than `max_side` pixels are shrunk first (the extra pixels cost time and do not help zxing)."""

    def __init__(self, try_harder: bool = True, max_side: int = 2000):
        self.try_harder = try_harder
        self.max_side = max_side

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        if missing_package("zxingcpp"):
            return "Python package 'zxing-cpp' is not installed"
        return None

    def decode(self, image: Image.Image) -> list[Barcode]:
        gray = image.convert("L")
        base = _same(gray, "original")
        if max(gray.size) > self.max_side:
            base = _scaled("original", gray, self.max_side / max(gray.size), Image.Resampling.LANCZOS)
        reads = self._read(base)
        if self.try_harder and (not reads or any(r.symbology == _NO_ADDON for r in reads)):
            reads = self._harder(base, reads)
        return [r.barcode for r in reads]

    def _read(self, variant: Variant, binarizer: str = "LocalAverage") -> list[_Read]:
        import zxingcpp

        results = zxingcpp.read_barcodes(
            variant.image,
            text_mode=zxingcpp.TextMode.Plain,  # the raw content: control characters (GS, RS) stay as they are
            ean_add_on_symbol=zxingcpp.EanAddOnSymbol.Read,
            binarizer=getattr(zxingcpp.Binarizer, binarizer),
        )
        reads = []
        for r in results:
            pos = r.position
            quad = (pos.top_left, pos.top_right, pos.bottom_right, pos.bottom_left)
            corners = [variant.to_original((p.x, p.y)) for p in quad]
            xs, ys = [c[0] for c in corners], [c[1] for c in corners]
            box = (min(xs), min(ys), max(xs), max(ys))
            reads.append(_Read(Barcode(text=r.text, format=str(r.format), box=box), r.symbology_identifier))
        return reads

    def _harder(self, base: Variant, first: list[_Read]) -> list[_Read]:
        """Re-read preprocessed copies, the original with a global-histogram binariser last. With no read yet, the
        first copy that decodes gives the reads; after that a copy can only add add-ons to EAN/UPC reads."""
        copies = [Variant(v.name, v.image, _compose(base.to_original, v.to_original))
                  for v in image_variants(base.image, self.max_side)]
        attempts = [(v, "LocalAverage") for v in copies] + [(base, "GlobalHistogram")]
        reads = first
        for variant, binarizer in attempts:
            found = self._read(variant, binarizer)
            if not reads:
                reads = found
            else:
                reads = _with_addons(reads, found) or reads
            if reads and not any(r.symbology == _NO_ADDON for r in reads):
                break
        return reads


def _compose(outer: Callable[[Point], Point], inner: Callable[[Point], Point]) -> Callable[[Point], Point]:
    return lambda p: outer(inner(p))


def _with_addons(first: list[_Read], found: list[_Read]) -> list[_Read] | None:
    """`first` with each add-on-less EAN/UPC replaced by a read of the same main code plus an add-on; None when no
    read in `found` extends one."""
    result, changed = [], False
    for read in first:
        text = read.barcode.text
        extended = next(
            (f for f in found
             if read.symbology == _NO_ADDON and f.symbology != _NO_ADDON and f.barcode.text.startswith(text)
             and len(f.barcode.text) - len(text) in _ADDON_LENGTHS and f.barcode.text.isdigit()),
            None,
        )
        if extended is not None:
            read = _Read(replace(read.barcode, text=extended.barcode.text), extended.symbology)
            changed = True
        result.append(read)
    return result if changed else None
