"""Where the images of an untrusted request may come from: one policy for `maestro serve`, the Agent Server graphs
and the tool, set by the operator.

Inline data URLs are checked (size caps, a full decode) and passed on; http(s) URLs are fetched only from
allow-listed hosts, without following redirects, within `fetch_timeout_s` for the whole fetch (not per read, which
a host trickling bytes would stretch without end); local paths only inside the operator's allowed directories
(after resolving symlinks, so `../` and links cannot step out), and by default there are none. Everything that
passes comes out as a verified base64 data URL, so the skills never touch the network or the disk for a client.

A refusal is an `ImageRefused` (an InputError) carrying the HTTP status and code the server answers with. A path
outside the allowed directories is refused before anything looks at it, and a path inside them that is not a
readable regular file (missing, a directory, a FIFO, a device) gets the very same refusal, so a refusal never tells
whether a file exists. A file inside them is read no further than the byte cap. Every image of a request is read and
its header checked before any is decoded.

A served graph (`build_graph(image_sources=...)`) resolves a run's images where they enter it: at intake, and, for
the images a client's `Command` or state update writes past intake, before that run (`episode.past_intake`). A
thread's image is resent with each question, so resolving must be cheap when repeated: the bytes that decoded once
are remembered by their digest (`_DECODABLE`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core.environment import IMAGE_DIRS, IMAGE_HOSTS
from ..core.memo import LRU
from ..core.shared_budget import BudgetExhausted
from ..errors import InputError
from .load import ImageHeader, PixelCapExceeded, image_header, load_image, read_regular_file

__all__ = ["ImageRefused", "ImageSources", "DECODE_WAIT_S", "host_entry"]


def host_entry(entry: str) -> str:
    """An allow-list entry in the one form URLs are matched in: `name` or `name:port` lower-cased, an IP address in
    its canonical form, an IPv6 one bracketed when it has a port (`::1`, `[::1]` and `[0:0::1]` are one entry, and
    `[::1]:8080` another). ValueError for what is no host."""
    text = entry.strip()
    bare_ipv6 = text.count(":") > 1 and not text.startswith("[")
    try:
        parts = urlsplit(f"//[{text}]" if bare_ipv6 else f"//{text}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not `name`, `name:port`, an IPv6 address or `[IPv6]:port` ({exc})") from None
    if not host or parts.path or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{entry!r} is not `name`, `name:port`, an IPv6 address or `[IPv6]:port`")
    return _host_key(host, port)


def _host_key(host: str, port: int | None) -> str:
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        host = host.lower()
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


DECODE_WAIT_S = 10.0
"""How long a door's check of an image waits for room in the decode budget before the request is refused as busy
(503 at `maestro serve`); the decodes of admitted work wait until there is room."""

_DECODABLE: LRU[str, str] = LRU(1024)
"""The format of image bytes that decoded fully, by their SHA-256: a thread's image comes again with its next
questions, and a digest costs milliseconds where a decode of a 40-megapixel PNG costs seconds."""
_VERIFYING = tuple(threading.Lock() for _ in range(64))
"""Locks by digest (striped): held while an image's bytes are decoded to verify them, so the requests of one image
sent at once decode it once."""


class ImageRefused(InputError):
    """An image reference the policy does not accept; `status`/`code`/`param` are what an HTTP surface answers."""

    def __init__(self, status: int, code: str, message: str, *, param: str, retry_after_s: int | None = None):
        self.status, self.code, self.param, self.retry_after_s = status, code, param, retry_after_s
        super().__init__(message)


class ImageSources(BaseModel):
    """The operator's image-source policy and size caps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_dirs: tuple[Path, ...] = Field((), description="directories whose image files a request may name")
    allowed_hosts: tuple[str, ...] = Field((), description="hosts (`name` or `name:port`) whose URLs are fetched")
    max_images: int = Field(8, ge=1, description="most images in one request")
    max_image_bytes: int = Field(8_000_000, gt=0, description="largest encoded image")
    fetch_timeout_s: float = Field(10.0, gt=0, description="time limit for fetching one allow-listed URL, the "
                                   "whole fetch (connecting, headers and every byte of the body)")
    decode_wait_s: float = Field(DECODE_WAIT_S, ge=0, description="how long checking an image waits for room in the "
                                 "process's decode budget (images.load.DECODE_MEMORY) before it is refused as busy")

    @field_validator("allowed_hosts")
    @classmethod
    def _host_entries(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(host_entry(h) for h in hosts)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ImageSources:
        """`MAESTRO_IMAGE_DIRS` and `MAESTRO_IMAGE_HOSTS` (both empty by default: data URLs only)."""
        dirs = tuple(Path(d) for d in IMAGE_DIRS.read(environ).split(os.pathsep) if d.strip())
        hosts = tuple(h.strip() for h in IMAGE_HOSTS.read(environ).split(",") if h.strip())
        return cls(allowed_dirs=dirs, allowed_hosts=hosts)

    def resolve(self, refs: list[str]) -> list[str]:
        """Verified data URLs for the image references of one request (ImageRefused naming the bad one). Every
        image is read and its header checked before any is decoded, so a request whose last image is refused
        decodes nothing; decoding then holds the process's decode budget (`images.load.DECODE_MEMORY`), and a
        decode that finds no room in time is a 503 `server_busy`."""
        if len(refs) > self.max_images:
            raise ImageRefused(413, "too_many_images", f"{len(refs)} images exceed the cap of {self.max_images}",
                               param="images")
        read = [self._read(ref, f"image {i}") for i, ref in enumerate(refs)]
        headers = [self._header(data, param) for data, param in read]
        return [self._verified(data, param, header) for (data, param), header in zip(read, headers)]

    def _read(self, ref: str, param: str) -> tuple[bytes, str]:
        """The bytes of one reference within the byte cap (decoded from a data URL, fetched, or read from an image
        directory), and the name its refusals use."""
        if not isinstance(ref, str):
            raise ImageRefused(400, "invalid_image", f"{param}: expected a string, got {type(ref).__name__}",
                               param=param)
        scheme = urlsplit(ref).scheme.lower() if "://" in ref or ref.startswith("data:") else ""
        if scheme == "data":
            data = self._data_url(ref, param)
        elif scheme in ("http", "https"):
            data = self._fetch(ref, param)
        elif scheme in ("", "file"):
            data = self._local(ref, param)
        else:
            raise ImageRefused(400, "unsupported_image_url", f"{param}: URL scheme {scheme!r} is not supported",
                               param=param)
        if len(data) > self.max_image_bytes:
            raise ImageRefused(413, "image_too_large",
                               f"{param}: {len(data):,} bytes exceeds the cap of {self.max_image_bytes:,} bytes",
                               param=param)
        return data, param

    def _local(self, ref: str, param: str) -> bytes:
        where = ("accepted only for image files inside the operator's image directories" if self.allowed_dirs
                 else "not accepted here")
        refused = ImageRefused(400, "local_path_not_allowed", f"{param}: local file paths are {where}; send the image "
                               "as a base64 data URL", param=param)
        if not self.allowed_dirs:
            raise refused
        raw = urlsplit(ref).path if ref.startswith("file:") else ref
        try:
            path = Path(raw).resolve()
        except (OSError, RuntimeError, ValueError):
            raise refused from None
        if not any(path.is_relative_to(d.resolve()) for d in self.allowed_dirs):
            raise refused
        data = read_regular_file(path, self.max_image_bytes + 1)
        if data is None:  # missing, a FIFO, a directory, unreadable: the same refusal as a path outside
            raise refused
        return data

    def _data_url(self, url: str, param: str) -> bytes:
        header, _, payload = url.partition(",")
        if not header.startswith("data:image/") or not header.endswith(";base64"):
            raise ImageRefused(400, "invalid_image", f"{param}: expected data:image/<type>;base64,<data>", param=param)
        if len(payload) * 3 // 4 > self.max_image_bytes + 3:
            raise ImageRefused(413, "image_too_large",
                               f"{param}: about {len(payload) * 3 // 4:,} bytes exceeds the cap of "
                               f"{self.max_image_bytes:,} bytes", param=param)
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ImageRefused(400, "invalid_image", f"{param}: invalid base64 ({exc})", param=param) from exc

    @staticmethod
    def _header(data: bytes, param: str) -> ImageHeader:
        """The image's declared format and size, checked against the pixel and aspect caps; nothing decoded."""
        try:
            return image_header(data, param)
        except PixelCapExceeded as exc:
            raise ImageRefused(413, "image_too_large", str(exc), param=param) from exc
        except InputError as exc:
            raise ImageRefused(400, "invalid_image", str(exc), param=param) from exc

    def _verified(self, data: bytes, param: str, header: ImageHeader) -> str:
        """The bytes as a data URL once they decoded fully (bounded: `images.MAX_DECODED_PIXELS`, within the decode
        budget), so truncated or corrupt files fail here, not inside a skill; once per content (`_DECODABLE`)."""
        url = f"data:image/{header.format};base64,{base64.b64encode(data).decode()}"
        digest = hashlib.sha256(data).hexdigest()
        if _DECODABLE.get(digest) is not None:
            return url
        # one decode of the same bytes at a time: requests sending an image another is verifying wait for its verdict
        # (within the decode wait) instead of decoding it again
        same = _VERIFYING[int(digest[:8], 16) % len(_VERIFYING)]
        if not same.acquire(timeout=self.decode_wait_s):
            raise ImageRefused(503, "server_busy", f"{param}: the server is verifying the same image for another "
                               f"request and it took longer than {self.decode_wait_s:g} s; retry shortly",
                               param=param, retry_after_s=max(1, round(self.decode_wait_s)))
        try:
            if _DECODABLE.get(digest) is None:
                try:  # the errors name the image as `param` does ("image 0: corrupt or truncated image ...")
                    load_image(url, wait_s=self.decode_wait_s, label=param)
                except BudgetExhausted as exc:
                    raise ImageRefused(503, "server_busy", str(exc), param=param,
                                       retry_after_s=exc.retry_after_s) from exc
                except InputError as exc:
                    raise ImageRefused(400, "invalid_image", str(exc), param=param) from exc
                _DECODABLE.put(digest, header.format)
        finally:
            same.release()
        return url

    def _fetch(self, url: str, param: str) -> bytes:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError as exc:  # a port out of range or not a number
            raise ImageRefused(400, "image_url_not_allowed", f"{param}: {url!r} is not a valid URL ({exc})",
                               param=param) from None
        host = _host_key(parts.hostname, None) if parts.hostname else ""
        netloc = _host_key(host, port) if host else ""
        if not host or (host not in self.allowed_hosts and netloc not in self.allowed_hosts):
            raise ImageRefused(400, "image_url_not_allowed",
                               f"{param}: remote image host {netloc or url!r} is not in the allow-list; send the image "
                               "as a base64 data URL", param=param)
        try:
            return asyncio.run(asyncio.wait_for(self._download(url, param), self.fetch_timeout_s))
        except TimeoutError:
            raise ImageRefused(400, "image_fetch_failed", f"{param}: fetching {url} took longer than "
                               f"{self.fetch_timeout_s:g} s (fetch_timeout_s)", param=param) from None
        except httpx.HTTPError as exc:
            raise ImageRefused(400, "image_fetch_failed", f"{param}: fetching {url} failed ({exc.__class__.__name__})",
                               param=param) from exc

    async def _download(self, url: str, param: str) -> bytes:
        """The body of `url`, no redirects followed, no further than the byte cap. The caller's deadline covers the
        whole fetch (a host that trickles bytes stays within it), so this runs on an event loop of its own, where
        the deadline can stop a read mid-way."""
        limit = self.max_image_bytes
        async with httpx.AsyncClient(timeout=self.fetch_timeout_s, follow_redirects=False) as client:
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise ImageRefused(400, "image_fetch_failed",
                                       f"{param}: {url} answered HTTP {response.status_code}", param=param)
                data = bytearray()
                async for block in response.aiter_bytes():
                    data.extend(block)
                    if len(data) > limit:
                        raise ImageRefused(413, "image_too_large",
                                           f"{param}: {url} is larger than the cap of {limit:,} bytes", param=param)
        return bytes(data)
