"""Loading images from paths or data URLs with errors that name the problem, never a crash."""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .errors import InputError

__all__ = ["MAX_PIXELS", "load_image", "image_to_data_url"]

MAX_PIXELS = 40_000_000
"""Images above this many pixels are refused (decompression-bomb guard)."""


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
            probe.seek(0)
            image = probe.convert("RGB")
    except InputError:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise InputError(f"image {name}: not a readable image ({exc.__class__.__name__})") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"image {name}: corrupt or truncated image ({exc})") from exc
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
    path = Path(ref)
    if not path.is_file():
        raise InputError(f"image {ref}: no such file")
    return _open_bytes(path.read_bytes(), ref)


def image_to_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """Encode an image as a base64 data URL (the OpenAI wire format for images)."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"
