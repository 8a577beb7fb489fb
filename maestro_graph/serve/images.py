"""The server's image policy: inline data URLs are checked and passed on; http(s) URLs are fetched only from
allow-listed hosts; local paths and every other scheme are refused (a server must not read its own disk for a client).

Everything that reaches the graph is a verified base64 data URL, so the skills never touch the network or the disk.
"""

from __future__ import annotations

import base64
import binascii
import io
from urllib.parse import urlsplit

import httpx
from PIL import Image, UnidentifiedImageError

from ..errors import InputError
from ..images import MAX_PIXELS, load_image
from .protocol import ApiError
from .settings import ServeSettings

__all__ = ["resolve_images"]


def resolve_images(urls: list[str], settings: ServeSettings) -> list[str]:
    """Verified data URLs for the image references of one request, or an ApiError naming the bad one."""
    if len(urls) > settings.max_images:
        raise ApiError(413, "too_many_images", f"{len(urls)} images exceed the cap of {settings.max_images}")
    return [_resolve(url, i, settings) for i, url in enumerate(urls)]


def _resolve(url: str, index: int, settings: ServeSettings) -> str:
    param = f"image {index}"
    scheme = urlsplit(url).scheme.lower() if "://" in url or url.startswith("data:") else ""
    if scheme == "data":
        return _check_data_url(url, param, settings)
    if scheme in ("http", "https"):
        return _fetch(url, param, settings)
    if scheme in ("", "file"):
        raise ApiError(400, "local_path_not_allowed",
                       f"{param}: local file paths are not accepted; send the image as a base64 data URL", param=param)
    raise ApiError(400, "unsupported_image_url", f"{param}: URL scheme {scheme!r} is not supported", param=param)


def _check_data_url(url: str, param: str, settings: ServeSettings) -> str:
    header, _, payload = url.partition(",")
    if not header.startswith("data:image/") or not header.endswith(";base64"):
        raise ApiError(400, "invalid_image", f"{param}: expected data:image/<type>;base64,<data>", param=param)
    if len(payload) * 3 // 4 > settings.max_image_bytes + 3:
        raise ApiError(413, "image_too_large",
                       f"{param}: about {len(payload) * 3 // 4:,} bytes exceeds the cap of "
                       f"{settings.max_image_bytes:,} bytes", param=param)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "invalid_image", f"{param}: invalid base64 ({exc})", param=param) from exc
    return _verified(data, param, settings)


def _verified(data: bytes, param: str, settings: ServeSettings) -> str:
    """The bytes as a data URL after checking the size caps and that they decode as an image."""
    if len(data) > settings.max_image_bytes:
        raise ApiError(413, "image_too_large",
                       f"{param}: {len(data):,} bytes exceeds the cap of {settings.max_image_bytes:,} bytes",
                       param=param)
    try:
        with Image.open(io.BytesIO(data)) as probe:
            width, height, fmt = probe.width, probe.height, (probe.format or "png").lower()
    except Image.DecompressionBombError as exc:  # PIL's own cap (above ours) refuses at open
        raise ApiError(413, "image_too_large", f"{param}: exceeds the cap of {MAX_PIXELS:,} pixels ({exc})",
                       param=param) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ApiError(400, "invalid_image", f"{param}: not a readable image ({exc.__class__.__name__})",
                       param=param) from exc
    if width * height > MAX_PIXELS:
        raise ApiError(413, "image_too_large",
                       f"{param}: {width}x{height} pixels exceeds the cap of {MAX_PIXELS:,} pixels", param=param)
    data_url = f"data:image/{fmt};base64,{base64.b64encode(data).decode()}"
    try:
        load_image(data_url)  # a full decode: truncated or corrupt files fail here, not inside a skill
    except InputError as exc:
        raise ApiError(400, "invalid_image", f"{param}: {exc}", param=param) from exc
    return data_url


def _fetch(url: str, param: str, settings: ServeSettings) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    netloc = f"{host}:{parts.port}" if parts.port else host
    allowed = {h.lower() for h in settings.allowed_image_hosts}
    if not host or (host not in allowed and netloc not in allowed):
        raise ApiError(400, "image_url_not_allowed",
                       f"{param}: remote image host {netloc or url!r} is not in the allow-list; send the image as a "
                       "base64 data URL", param=param)
    limit = settings.max_image_bytes
    try:
        with httpx.stream("GET", url, timeout=settings.fetch_timeout_s, follow_redirects=False) as response:
            if response.status_code != 200:
                raise ApiError(400, "image_fetch_failed", f"{param}: {url} answered HTTP {response.status_code}",
                               param=param)
            data = bytearray()
            for block in response.iter_bytes():
                data.extend(block)
                if len(data) > limit:
                    raise ApiError(413, "image_too_large",
                                   f"{param}: {url} is larger than the cap of {limit:,} bytes", param=param)
    except httpx.HTTPError as exc:
        raise ApiError(400, "image_fetch_failed", f"{param}: fetching {url} failed ({exc.__class__.__name__})",
                       param=param) from exc
    return _verified(bytes(data), param, settings)
