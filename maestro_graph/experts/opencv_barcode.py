"""OpenCV's own decoders: the ArUco-based QR code detector and the 1D barcode detector (EAN-8/13, UPC-A/E).

A second opinion beside zxing-cpp with fewer formats (no Data Matrix, Code 128, Micro QR). Like the zxing expert it
re-reads preprocessed copies (the same `image_variants`) when the first pass finds nothing. Format names follow
zxing-cpp's spelling ("QR Code", "EAN-13", "UPC-A") so skills can compare experts' reads.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from ..backends.packages import missing_package
from .protocols import Barcode
from .zxing_barcode import Variant, read_with_variants

if TYPE_CHECKING:
    import cv2

__all__ = ["OpenCVBarcodeExpert"]

_FORMAT_NAMES = {"EAN_13": "EAN-13", "EAN_8": "EAN-8", "UPC_A": "UPC-A", "UPC_E": "UPC-E"}


def _box(points: np.ndarray, variant: Variant) -> tuple[float, float, float, float]:
    corners = [variant.to_original((float(x), float(y))) for x, y in np.asarray(points).reshape(-1, 2)]
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    return (min(xs), min(ys), max(xs), max(ys))


class OpenCVBarcodeExpert:
    """QR codes and retail 1D barcodes with OpenCV. The detectors are built on first use; OpenCV detector objects
    are not safe to share between threads, so calls on one expert are serialised."""

    def __init__(self, try_harder: bool = True, max_side: int = 2000):
        self.try_harder = try_harder
        self.max_side = max_side
        self._detectors: tuple[cv2.QRCodeDetectorAruco, cv2.barcode.BarcodeDetector] | None = None
        self._lock = threading.Lock()

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        if missing_package("cv2"):
            return "Python package 'opencv-python-headless' is not installed"
        import cv2

        if not hasattr(cv2, "barcode") or not hasattr(cv2, "QRCodeDetectorAruco"):
            return f"OpenCV {cv2.__version__} lacks cv2.barcode or cv2.QRCodeDetectorAruco (needs OpenCV >= 4.8)"
        return None

    def decode(self, image: Image.Image) -> list[Barcode]:
        with self._lock:
            return read_with_variants(image, self._read, max_side=self.max_side, try_harder=self.try_harder)

    def _read(self, variant: Variant) -> list[Barcode]:
        import cv2

        if self._detectors is None:
            self._detectors = (cv2.QRCodeDetectorAruco(), cv2.barcode.BarcodeDetector())
        qr, linear = self._detectors
        pixels = np.ascontiguousarray(np.asarray(variant.image))
        found: list[Barcode] = []
        _, texts, points, _ = qr.detectAndDecodeMulti(pixels)
        for text, quad in zip(texts or (), points if points is not None else ()):
            if text:
                found.append(Barcode(text=text, format="QR Code", box=_box(quad, variant)))
        _, texts, kinds, points = linear.detectAndDecodeWithType(pixels)
        for text, kind, quad in zip(texts or (), kinds or (), points if points is not None else ()):
            if text:
                found.append(Barcode(text=text, format=_FORMAT_NAMES.get(kind, kind), box=_box(quad, variant)))
        return found
