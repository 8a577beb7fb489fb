"""Loading images from paths or data URLs with errors that name the problem, never a crash.

Hostile files are refused with an InputError naming the image: empty, truncated or non-image bytes, more pixels
than the cap (a decompression bomb is refused from its header, before decoding), extreme aspect ratios, and remote
URLs (fetching is the server's job, from allow-listed hosts only). An animated or multi-page file is read as its
first frame, and the returned image says so in `info["maestro_note"]`. Greyscale images of more than 8 bits are
scaled to 8 bits, not clipped (see `_to_rgb`).
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import re
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import InputError

__all__ = ["MAX_PIXELS", "MAX_ASPECT", "load_image", "image_to_data_url"]

MAX_PIXELS = 40_000_000
"""Images above this many pixels are refused (decompression-bomb guard)."""
MAX_ASPECT = 100
"""Images whose long side is more than this many times the short side are refused (no expert reads a 1-pixel
strip; tiling one would make thousands of calls)."""

log = logging.getLogger("maestro.images")
_REMOTE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _to_rgb(image: Image.Image) -> Image.Image:
    """An RGB copy of `image`. PIL's own conversion clips the integer modes ("I", "I;16...") and the float mode
    ("F") to 0..255, so a 16-bit greyscale PNG (values up to 65535) would read as all white and be answered
    confidently. Integer greyscale is taken as 16-bit data and shown by its high byte (value >> 8), as image
    viewers show it: dark stays dark, and a nearly black image is not stretched into a contrasty one. Float
    greyscale has no fixed range: values within 0..1 are scaled by 255 (the usual convention for float images),
    others are read as 0..255, both clipped."""
    if image.mode.startswith("I"):
        grey = np.clip(np.asarray(image) >> 8, 0, 255)  # native uint16/int32: no widening of a 40-MP image
    elif image.mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float32))
        grey = np.clip(values * 255 if values.size and values.min() >= 0 and values.max() <= 1 else values, 0, 255)
    else:
        return image.convert("RGB")
    rgb = Image.fromarray(grey.astype(np.uint8), "L").convert("RGB")
    rgb.info.update(image.info)
    return rgb


def _open_bytes(data: bytes, name: str) -> Image.Image:
    if not data:
        raise InputError(f"image {name}: the file is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as probe:
            width, height = probe.size
            if width * height > MAX_PIXELS:
                raise InputError(
                    f"image {name}: {width}x{height} pixels is above the cap of {MAX_PIXELS:,} pixels"
                )
            if max(width, height) > MAX_ASPECT * min(width, height):
                raise InputError(
                    f"image {name}: {width}x{height} has an extreme aspect ratio (above {MAX_ASPECT}:1)"
                )
            frames = getattr(probe, "n_frames", 1)
            probe.seek(0)
            image = _to_rgb(probe)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError(f"image {name}: above the cap of {MAX_PIXELS:,} pixels (decompression bomb)") from exc
    except UnidentifiedImageError as exc:
        raise InputError(f"image {name}: not a readable image ({exc.__class__.__name__})") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"image {name}: corrupt or truncated image ({exc})") from exc
    if frames > 1:
        image.info["maestro_note"] = f"image {name} has {frames} frames; only the first is read"
        log.warning(image.info["maestro_note"])
    return image


def load_image(ref: str) -> Image.Image:
    """Load an RGB image from a file path or a `data:image/...;base64,` URL."""
    if ref.startswith("data:"):
        header, _, payload = ref.partition(",")
        if ";base64" not in header:
            raise InputError("image data URL: only base64 data URLs are accepted")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InputError(f"image data URL: invalid base64 ({exc})") from exc
        return _open_bytes(data, "data URL")
    if _REMOTE_RE.match(ref):
        raise InputError(f"image {ref}: remote URLs are not fetched here; download the image first, or send it to "
                         "`maestro serve`, which fetches from allow-listed hosts")
    path = Path(ref)
    if not path.is_file():
        raise InputError(f"image {ref}: no such file")
    return _open_bytes(path.read_bytes(), ref)


def image_to_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """Encode an image as a base64 data URL (the OpenAI wire format for images)."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"
