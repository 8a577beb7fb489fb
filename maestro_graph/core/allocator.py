"""Giving large freed buffers back to the system at once, in a process where many threads handle images.

glibc's malloc serves a large request from a mapping of its own, returned to the system when freed, but it raises
that threshold (up to 32 MB) each time such a buffer is freed, so the next images and arrays of a thread land in its
arena, and an arena keeps what it once held: a server whose worker, door and expert threads each decoded or analysed
an image at the pixel cap would hold all of it at once, long after. With the threshold fixed, what the process
holds follows what its threads use (docs/results.md, "The doors under traffic"). Other C
libraries keep their own policy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["LARGE_BUFFER_BYTES", "return_large_buffers"]

LARGE_BUFFER_BYTES = 1 << 20
"""Buffers of at least this size get their own mapping, given back to the system when freed (a megapixel of grey
is one; numpy arrays of a figure are tens of them)."""
_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the threshold (malloc.h); setting it also stops its adjustment."""

log = logging.getLogger("maestro.allocator")


def return_large_buffers(threshold_bytes: int = LARGE_BUFFER_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold_bytes` for this process; False (and nothing changed) where the C
    library is not glibc."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        log.info("the C library is not glibc: large buffers follow its own policy")
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold_bytes))
