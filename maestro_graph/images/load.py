"""Loading images from paths or data URLs with errors that name the problem, never a crash.

Hostile files are refused with an InputError naming the image: empty, truncated or non-image bytes, more pixels
than the cap (a decompression bomb is refused from its header, before decoding), extreme aspect ratios, files that
are not regular files (a FIFO would block the reader) or larger than `MAX_FILE_BYTES` (read no further than the
cap), and remote URLs (fetching is the server's job, from allow-listed hosts only). An animated or multi-page file
is read as its first frame, and the returned image says so in `info["maestro_note"]`. Greyscale images of more than
8 bits are scaled to 8 bits, not clipped (see `_to_rgb`).

Memory is bounded by what is decoded, not by what the file declares: a 40 KB PNG can declare 40 million pixels,
and experts working on such an image hold gigabytes. So an image is decoded at most at `MAX_DECODED_PIXELS` (JPEG
at a reduced scale by the decoder itself; other formats reduced by an integer factor right after decoding), and the
images of one request share `REQUEST_DECODED_PIXELS` (`load_images`). The size the file declared stays in
`info["maestro_source_size"]`.

Decoding itself takes more than the decoded image: the full-size pixels exist for a moment (a 40-megapixel WebP
takes some 600 MB while Pillow decodes it), so every decode in the process holds its estimate (`decode_bytes`) of
one budget, `DECODE_MEMORY`, while it runs, so many requests at once take turns instead of decoding together. A
decode waits for room until there is some, unless its caller gives a wait (`load_image(wait_s=...)`: a door, which
then answers "busy", `core.shared_budget.BudgetExhausted`). `maestro serve` sizes the budget (`--decode-memory-mb`).
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..core.shared_budget import SharedBudget
from ..errors import InputError

__all__ = ["MAX_PIXELS", "MAX_ASPECT", "MAX_DECODED_PIXELS", "MAX_FILE_BYTES", "REQUEST_DECODED_PIXELS",
           "DECODE_MEMORY", "DECODE_MEMORY_BYTES", "ImageHeader", "PixelCapExceeded",
           "WORKING_BYTES_PER_PIXEL", "OCR_PIXELS", "OCR_BYTES_PER_PIXEL", "decode_bytes", "working_set_bytes",
           "image_header", "load_image", "load_images", "image_to_data_url", "fitted_data_url", "FittedImage",
           "read_regular_file"]

MAX_PIXELS = 40_000_000
"""Images declaring more pixels than this are refused (decompression-bomb guard)."""
MAX_ASPECT = 100
"""Images whose long side is more than this many times the short side are refused (no expert reads a 1-pixel
strip; tiling one would make thousands of calls)."""
MAX_DECODED_PIXELS = 12_000_000
"""The most pixels one image is decoded at; larger images are reduced on load by the smallest integer factor that
fits (a 35-megapixel A4 scan at 600 dpi becomes 300 dpi, still above what the OCR and document skills read at)."""
REQUEST_DECODED_PIXELS = 24_000_000
"""The most pixels the images of one request are decoded at together (`load_images` shares it among them), so
eight images at the pixel cap cost what two images at `MAX_DECODED_PIXELS` cost."""
MAX_FILE_BYTES = 64_000_000
"""The largest image file read from a path (a task file's or the operator's); the server caps what clients send
far lower (`ImageSources.max_image_bytes`)."""

DECODE_MEMORY_BYTES = 512_000_000
"""The default memory that decodes in flight and the episodes working on images may take together, across every
thread of the process: one image at the pixel cap at a time in the worst format (WebP), two or three PNGs."""
DECODE_MEMORY = SharedBudget(DECODE_MEMORY_BYTES, unit="bytes")
"""The process's image memory budget, in bytes of the `decode_bytes` and `working_set_bytes` estimates (`maestro
serve` configures it): a door's decode holds its estimate while it decodes, a served episode its working set while
it runs (`SharedBudget.reserve`: its own decodes are inside it)."""
WORKING_BYTES_PER_PIXEL = 16
"""What the experts of one episode hold at once per decoded pixel of its images, the decoded RGB image (3 bytes)
included: the OpenCV analyser's byte-sized copies (greyscale, blurred, thresholded, edges, labels: 129 MB at the
3150x3150 a 40-megapixel image is decoded to, 13 a pixel), or OCR's converted copy."""
OCR_PIXELS = 2000 * 2000
"""The most pixels the OCR expert reads an image at: RapidOCR reduces a larger image to 2000 pixels on its long
side before its text detector runs."""
OCR_BYTES_PER_PIXEL = 140
"""What RapidOCR's text detector holds while it reads an image, per pixel it reads (its network's activations,
whatever the image shows: 135 MB for 1000x1000 pixels, 540 MB at 2000x2000, measured): an episode's largest
single expert call, on top of what it holds per decoded pixel."""

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


def _reduction(width: int, height: int, budget: int) -> int:
    """The smallest integer factor that brings a width x height image within `budget` pixels."""
    factor = max(1, math.isqrt(max(0, width * height - 1) // budget))
    while math.ceil(width / factor) * math.ceil(height / factor) > budget:
        factor += 1
    return factor


_REDUCIBLE = {"1": "L", "P": "RGB", "PA": "RGB", "I;16": "I", "I;16L": "I", "I;16B": "I", "I;16N": "I"}
"""Modes PIL's `reduce` refuses (or, for palettes, would average as indices), and the mode to reduce them in."""


def _decode(probe: Image.Image, data: bytes, budget: int) -> Image.Image:
    """The opened image's first frame, decoded within `budget` pixels: JPEG by the decoder at 1/2, 1/4 or 1/8
    scale (the full-size image never exists), a still WebP to be reduced by libwebp into 3 bytes a pixel
    (`_reduced_webp`), then any format reduced by the factor still needed."""
    width, height = probe.size
    factor = _reduction(width, height, budget)
    if factor > 1 and _decodes_reduced(probe, budget):
        rgb = _reduced_webp(data, probe.size, factor)
        rgb.info.update(probe.info)
        rgb.info["maestro_source_size"] = (width, height)
        return rgb
    if factor > 1:
        probe.draft(None, (math.ceil(width / factor), math.ceil(height / factor)))  # a no-op except for JPEG
    image: Image.Image = probe
    factor = _reduction(*probe.size, budget)
    if factor > 1:
        if image.mode in _REDUCIBLE:
            image = image.convert(_REDUCIBLE[image.mode])
        image = image.reduce(factor)
    rgb = _to_rgb(image)
    rgb.info.update(probe.info)
    rgb.info["maestro_source_size"] = (width, height)
    return rgb


_STRIP_ROWS = 256
"""Rows of the full-size pixels reduced at a time by `_reduced_webp` (a multiple of every reduction factor's
blocks is taken: 6300 pixels wide, some 6 MB a strip)."""


def _decodes_reduced(probe: Image.Image, budget: int) -> bool:
    """Whether `_decode` reads this image through `_reduced_webp`: a still WebP with more pixels than `budget`."""
    return (probe.format == "WEBP" and getattr(probe, "n_frames", 1) == 1
            and probe.size[0] * probe.size[1] > budget)


def _reduced_webp(data: bytes, size: tuple[int, int], factor: int) -> Image.Image:
    """A still WebP decoded at full size into 3 bytes a pixel (OpenCV's libwebp, which writes BGR straight into
    its array) and reduced by `factor` a strip at a time with Pillow's own `reduce`, so the result is the image
    Pillow decodes and reduces, pixel for pixel, without the 16 bytes a pixel Pillow's WebP decoder holds (its
    RGBA canvas, a copy as bytes and the image: some 600 MB at 40 megapixels, against some 150 MB here)."""
    import cv2

    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if bgr is None or (bgr.shape[1], bgr.shape[0]) != size:
        raise OSError("libwebp could not decode it")
    width, height = size
    out = Image.new("RGB", (math.ceil(width / factor), math.ceil(height / factor)))
    rows = max(1, _STRIP_ROWS // factor) * factor  # strips on block boundaries: Pillow's blocks, unchanged
    for top in range(0, height, rows):
        strip = Image.fromarray(np.ascontiguousarray(bgr[top:top + rows, :, ::-1]), "RGB")
        out.paste(strip.reduce(factor), (0, top // factor))
    return out


class PixelCapExceeded(InputError):
    """An image declares more pixels than `MAX_PIXELS` (a 413 at a door, where other bad images are a 400)."""


@dataclass(frozen=True)
class ImageHeader:
    """What an image file declares, read without decoding a pixel."""

    format: str
    width: int
    height: int


_BYTES_PER_PIXEL = {"WEBP": 16}
"""Measured peaks of decoding, per declared pixel, where the mode does not say it: Pillow decodes a WebP as RGBA
and copies it twice (about 15 bytes a pixel)."""
_REDUCED_WEBP_BYTES_PER_PIXEL = 6
"""The measured peak of `_reduced_webp` per declared pixel: the 3-byte pixels and libwebp's own planes (some 230 MB
at 40 megapixels)."""


def decode_bytes(probe: Image.Image, budget: int = MAX_DECODED_PIXELS) -> int:
    """The memory decoding the opened image within `budget` pixels takes at its peak, estimated from its declared
    size: the full-size pixels in the file's mode and their RGB conversion (2 bytes a band, and 1, a pixel: 7 for
    RGB, 3 for greyscale; palettes are converted to RGB before they are reduced), or the measured figure of its
    format (a still WebP above the budget is decoded by libwebp into 3 bytes a pixel, `_reduced_webp`). A JPEG
    above the budget is decoded at a reduced scale by the decoder itself, so it counts at most `MAX_DECODED_PIXELS`
    pixels."""
    width, height = probe.size
    pixels = min(width * height, MAX_DECODED_PIXELS) if probe.format == "JPEG" else width * height
    if _decodes_reduced(probe, budget):
        return pixels * _REDUCED_WEBP_BYTES_PER_PIXEL
    per_pixel = _BYTES_PER_PIXEL.get(probe.format or "")
    if per_pixel is None:
        bands = 3 if probe.mode in ("P", "PA", "1") else len(probe.getbands())
        per_pixel = 2 * bands + 1
    return pixels * per_pixel


def working_set_bytes(refs: list[str] | tuple[str, ...]) -> int:
    """The memory an episode on these images holds at its peak, estimated from what they declare: its largest
    decode (`decode_bytes`: the full-size pixels exist while one decodes), for each image its decoded pixels
    (within its share of `REQUEST_DECODED_PIXELS`) at `WORKING_BYTES_PER_PIXEL`, and one OCR call on its largest
    image (`OCR_BYTES_PER_PIXEL` over at most `OCR_PIXELS`). A reference whose header cannot be read here (not a
    data URL, or not an image) counts as an image at the pixel cap in the worst format."""
    share = min(MAX_DECODED_PIXELS, REQUEST_DECODED_PIXELS // max(1, len(refs)))
    decodes, working, largest = [0], 0, 0
    for ref in refs:
        try:
            header, _, payload = ref.partition(",")
            if not header.startswith("data:") or ";base64" not in header:
                raise InputError("not a data URL")
            with Image.open(io.BytesIO(base64.b64decode(payload))) as probe:
                decodes.append(decode_bytes(probe, share))
                pixels = probe.size[0] * probe.size[1]
        except (*_UNREADABLE, InputError, ValueError, binascii.Error):
            decodes.append(MAX_PIXELS * _BYTES_PER_PIXEL["WEBP"])
            pixels = MAX_PIXELS
        working += min(pixels, share) * WORKING_BYTES_PER_PIXEL
        largest = max(largest, min(pixels, share))
    return max(decodes) + working + min(largest, OCR_PIXELS) * OCR_BYTES_PER_PIXEL


def _check_declared(probe: Image.Image, label: str) -> None:
    width, height = probe.size
    if width * height > MAX_PIXELS:
        raise PixelCapExceeded(f"{label}: {width}x{height} pixels is above the cap of {MAX_PIXELS:,} pixels")
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise InputError(f"{label}: {width}x{height} has an extreme aspect ratio (above {MAX_ASPECT}:1)")


def _unreadable(exc: Exception, label: str) -> InputError:
    if isinstance(exc, Image.DecompressionBombError):
        return PixelCapExceeded(f"{label}: above the cap of {MAX_PIXELS:,} pixels (decompression bomb)")
    if isinstance(exc, UnidentifiedImageError):
        return InputError(f"{label}: not a readable image ({exc.__class__.__name__})")
    return InputError(f"{label}: corrupt or truncated image ({exc})")


_UNREADABLE = (Image.DecompressionBombError, UnidentifiedImageError, OSError, SyntaxError, ValueError)


def image_header(data: bytes, label: str) -> ImageHeader:
    """The format and declared size of image bytes, checked against the caps (pixels, aspect ratio) without
    decoding: a door checks every image of a request this way before it decodes any. `label` names the image in
    the messages, as the caller's own do ("image 0")."""
    if not data:
        raise InputError(f"{label}: the file is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as probe:
            _check_declared(probe, label)
            return ImageHeader((probe.format or "png").lower(), *probe.size)
    except _UNREADABLE as exc:
        raise _unreadable(exc, label) from exc


def _open_bytes(data: bytes, label: str, budget: int = MAX_DECODED_PIXELS, wait_s: float | None = None) -> Image.Image:
    if not data:
        raise InputError(f"{label}: the file is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as probe:
            _check_declared(probe, label)
            frames = getattr(probe, "n_frames", 1)
            probe.seek(0)
            with DECODE_MEMORY.hold(decode_bytes(probe, budget), label, wait_s=wait_s):
                image = _decode(probe, data, budget)
    except _UNREADABLE as exc:
        raise _unreadable(exc, label) from exc
    if frames > 1:
        image.info["maestro_note"] = f"{label} has {frames} frames; only the first is read"
        log.warning(image.info["maestro_note"])
    return image


def read_regular_file(path: str | Path, limit: int) -> bytes | None:
    """At most `limit` bytes of `path`, or None when it is not a readable regular file (missing, a directory, a
    FIFO, a device). The file is opened without blocking (opening a FIFO with no writer would wait forever) and its
    type is checked on the open descriptor, so a path swapped for a FIFO after a check cannot slip through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read(limit)
        except OSError:
            return None


def load_image(ref: str, *, budget: int = MAX_DECODED_PIXELS, wait_s: float | None = None,
               label: str | None = None) -> Image.Image:
    """Load an RGB image from a file path or a `data:image/...;base64,` URL, decoded within `budget` pixels, when
    `DECODE_MEMORY` has room (waiting at most `wait_s`, then BudgetExhausted; None: until there is room). Errors
    name it as `label` (default: "image data URL", or "image PATH")."""
    if ref.startswith("data:"):
        label = label or "image data URL"
        header, _, payload = ref.partition(",")
        if ";base64" not in header:
            raise InputError(f"{label}: only base64 data URLs are accepted")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InputError(f"{label}: invalid base64 ({exc})") from exc
        return _open_bytes(data, label, budget, wait_s)
    if _REMOTE_RE.match(ref):
        raise InputError(f"image {ref}: remote URLs are not fetched here; download the image first, or send it to "
                         "`maestro serve`, which fetches from allow-listed hosts")
    contents = read_regular_file(ref, MAX_FILE_BYTES + 1)
    if contents is None:
        kind = "not a regular file" if Path(ref).exists() else "no such file"
        raise InputError(f"image {ref}: {kind}")
    if len(contents) > MAX_FILE_BYTES:
        raise InputError(f"image {ref}: larger than the cap of {MAX_FILE_BYTES:,} bytes")
    return _open_bytes(contents, label or f"image {ref}", budget, wait_s)


def load_images(refs: list[str] | tuple[str, ...]) -> list[Image.Image]:
    """The images of one request, one after another, each within its share of `REQUEST_DECODED_PIXELS` (and of
    `MAX_DECODED_PIXELS`): what a request can make a worker hold does not grow with its number of images."""
    budget = min(MAX_DECODED_PIXELS, REQUEST_DECODED_PIXELS // max(1, len(refs)))
    return [load_image(ref, budget=budget) for ref in refs]


def image_to_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """Encode an image as a base64 data URL (the OpenAI wire format for images)."""
    return _data_url(_encode(image, fmt), fmt)


def _encode(image: Image.Image, fmt: str, **options: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def _data_url(data: bytes, fmt: str) -> str:
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(data).decode()}"


JPEG_QUALITY = 90


@dataclass(frozen=True)
class FittedImage:
    """An image as an endpoint is sent it: `url` is None when even JPEG is over the byte limit (the caller names
    whose limit), with the size it was sent at and its encoded bytes for that message."""

    url: str | None
    size: tuple[int, int]
    encoded_bytes: int


def fitted_data_url(image: Image.Image, max_side: int, max_bytes: int) -> FittedImage:
    """The data URL an endpoint with these limits is sent: downscaled to `max_side`, PNG when it fits `max_bytes`
    (lossless for text in charts and documents), else JPEG. One encoder for the vision-chat experts and the LM
    router's endpoint, so a limit means the same on both."""
    sent = image.convert("RGB")
    if max(sent.size) > max_side:
        sent.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    data = b""
    for fmt, options in (("PNG", {}), ("JPEG", {"quality": JPEG_QUALITY})):
        data = _encode(sent, fmt, **options)
        if len(data) <= max_bytes:
            return FittedImage(_data_url(data, fmt), sent.size, len(data))
    return FittedImage(None, sent.size, len(data))
