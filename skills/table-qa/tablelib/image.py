"""Preparing a table image for OCR.

Rendered tables are small (text ~10 px high), put white text on coloured header bands and draw grid lines that OCR
engines read as `|` or `—`. We enlarge the image and redraw every pixel as its contrast with the local background
(dark ink on white whatever the colours), with long grid lines removed.

Every table-qa pair cleans the same image the same way before its own OCR engine reads it, so the last few cleaned
images are kept (grey, keyed by the pixels' content hash): the second engine's reading skips the work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import cv2
import numpy as np
from PIL import Image

from maestro_graph.digests import cache_key

__all__ = ["clean_for_ocr", "ocr_scale"]

OCR_SCALE = 3  # enlargement factor for small tables; boxes found on the cleaned image are divided by it
MAX_CLEAN_SIDE = 2400  # px: enlarging past this adds OCR time (quadratic) but no legibility; large pages stay 1x
_INK_THRESHOLD = 15  # grey-level difference from the background that counts as ink when finding grid lines
_LINE_LENGTH = 25  # px (before scaling): ink runs at least this long and one pixel thin are grid lines
_KEEP = 4  # cleaned images kept
_cleaned: OrderedDict[str, Image.Image] = OrderedDict()
_lock = threading.Lock()


def ocr_scale(image: Image.Image) -> int:
    """How much to enlarge `image` before the second reading: 3x for a rendered table, less for a large page."""
    return max(1, min(OCR_SCALE, MAX_CLEAN_SIDE // max(image.size)))


def clean_for_ocr(image: Image.Image, scale: int) -> Image.Image:
    """Enlarged, background-normalised, grid-free copy of `image` (same aspect ratio, `scale` times larger)."""
    key = cache_key(image, scale)
    with _lock:
        done = _cleaned.get(key)
    if done is None:
        done = _clean(image, scale)
        with _lock:
            _cleaned[key] = done
            while len(_cleaned) > _KEEP:
                _cleaned.popitem(last=False)
    return done.convert("RGB")  # a new image: the caller may draw on it


def _clean(image: Image.Image, scale: int) -> Image.Image:
    gray = cv2.cvtColor(np.asarray(image.convert("RGB")), cv2.COLOR_RGB2GRAY)
    gray = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    background = cv2.medianBlur(gray, 10 * scale + 1)  # wider than a stroke, so the median is the cell colour
    contrast = cv2.absdiff(gray, background)
    ink = (contrast > _INK_THRESHOLD).astype(np.uint8) * 255
    for kernel in ((_LINE_LENGTH * scale, 1), (1, _LINE_LENGTH * scale)):
        lines = cv2.morphologyEx(ink, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, kernel))
        contrast[cv2.dilate(lines, np.ones((3, 3), np.uint8)) > 0] = 0
    out = 255 - np.clip(contrast.astype(np.int32) * 2, 0, 255).astype(np.uint8)
    return Image.fromarray(out)
