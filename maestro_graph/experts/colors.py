"""The everyday names of colours, for pixels and for figures: a saturated colour by its hue, a dull one by its
brightness (black, gray, white), brown between. Pixels are named by code (an index into COLOR_NAMES), in arrays of
bytes: an analyser names every pixel of images up to 12 megapixels, on several threads at once."""

from __future__ import annotations

import numpy as np

from .protocols import COLOR_NAMES

__all__ = ["color_name", "color_code", "name_pixels"]

_HUE_BINS = ((15, "red"), (45, "orange"), (70, "yellow"), (165, "green"), (195, "cyan"), (255, "blue"),
             (280, "purple"), (320, "magenta"), (345, "pink"), (360, "red"))
"""Upper hue bounds in degrees for saturated colours; matplotlib's and the web's named colours fall in the bins."""


def color_name(rgb) -> str:
    """The everyday name of an RGB colour (one of COLOR_NAMES)."""
    return COLOR_NAMES[name_pixels(np.asarray(rgb, dtype=np.uint8).reshape(1, 1, 3))[0, 0]]


_CODE = {name: code for code, name in enumerate(COLOR_NAMES)}
_HUE_DEGREES = np.arange(256, dtype=np.float32) * np.float32(360 / 256)  # OpenCV's hue byte (exact in float32)
_HUE_CODES = np.array([_CODE[next(n for bound, n in _HUE_BINS if h < bound)] for h in _HUE_DEGREES], np.uint8)


def color_code(name: str) -> int:
    """The code of a colour name; one no pixel has (255) for a name outside COLOR_NAMES."""
    return _CODE.get(name, 255)


def name_pixels(rgb: np.ndarray) -> np.ndarray:
    """The colour of every pixel of an HxWx3 uint8 array as an index into COLOR_NAMES (vectorised `color_name`).
    Codes and byte-sized arrays, not names: a 10-megapixel figure would take 320 MB as names and 240 MB more as
    64-bit copies, per call, and a server runs several calls at once."""
    import cv2

    hsv = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2HSV_FULL)
    hue, value = _HUE_DEGREES[hsv[..., 0]], hsv[..., 2]
    chroma = rgb.max(axis=2) - rgb.min(axis=2)
    codes = _HUE_CODES[hsv[..., 0]]
    codes[(hue < 45) & (value < 170) & (chroma < 120)] = _CODE["brown"]
    grey = chroma < 40
    codes[grey] = np.where(value[grey] < 70, _CODE["black"], np.where(value[grey] < 215, _CODE["gray"], _CODE["white"]))
    return codes
