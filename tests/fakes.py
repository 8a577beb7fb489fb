"""Faulty experts for fault-containment tests. They stand in for real experts that crash or hang, which cannot be
made to fail on demand; every other test uses the real experts."""

from __future__ import annotations

import os
import time
from pathlib import Path

from maestro_graph.experts.protocols import TextBox


class CrashingOCRExpert:
    """An OCR expert whose every call raises."""

    def ocr(self, image):
        raise RuntimeError("simulated engine crash")


class HangingOCRExpert:
    """An OCR expert that answers only after `delay_s` (longer than its card's timeout in the tests). With `calls`,
    each call first appends a line to that file, so a test counts the calls of several server processes."""

    def __init__(self, delay_s: float = 5.0, calls: str | None = None):
        self.delay_s = delay_s
        self.calls = Path(calls) if calls else None

    def ocr(self, image):
        if self.calls is not None:
            with self.calls.open("a") as fh:
                fh.write(f"{os.getpid()}\n")
        time.sleep(self.delay_s)
        return [TextBox("late", (0, 0, 1, 1), 1.0)]


class MissingBinaryExpert:
    """An expert whose availability check fails, like Tesseract without its binary."""

    @classmethod
    def unavailable_reason(cls, **_):
        return "the `nonexistent-binary` program is not on PATH"

    def ocr(self, image):  # pragma: no cover - never called: the registry refuses unavailable models
        raise AssertionError("unavailable expert was called")


class DyingOnceBarcodeExpert:
    """A barcode reader whose process dies on its first call, as a cluster worker whose machine goes away: the first
    process to call it writes `marker` and exits at once; every later call reads the barcode with zxing-cpp."""

    def __init__(self, marker: str):
        self.marker = Path(marker)

    def decode(self, image):
        if not self.marker.exists():
            self.marker.touch()
            os._exit(1)
        from maestro_graph.experts.zxing_barcode import ZXingBarcodeExpert

        return ZXingBarcodeExpert().decode(image)


class GatedBarcodeExpert:
    """zxing-cpp's barcode reader that holds each call until a test opens the gate: a call first writes its
    process id into `inside` (a folder), then waits for the file `gate`, like a reader behind a busy server. A test
    sees which worker processes are inside an item, takes a node away, and opens the gate; a gate never opened lets
    each call through after `max_wait_s`, so a broken test ends instead of hanging."""

    def __init__(self, inside: str, gate: str, max_wait_s: float = 120.0):
        self.inside, self.gate, self.max_wait_s = Path(inside), Path(gate), max_wait_s

    def decode(self, image):
        from maestro_graph.experts.zxing_barcode import ZXingBarcodeExpert

        (self.inside / str(os.getpid())).touch()
        deadline = time.monotonic() + self.max_wait_s
        while not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return ZXingBarcodeExpert().decode(image)
