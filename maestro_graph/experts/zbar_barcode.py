"""ZBar (Debian's `libzbar0`, through `pyzbar`) as a barcode expert: an expert that no training run of the project
has seen, for measuring whether a trained policy routes to a card it meets for the first time.

ZBar reads QR codes and the common 1D symbologies (EAN/UPC, Code 128, Code 39, Interleaved 2 of 5, Codabar); it
reads no Data Matrix, Aztec or PDF417. Like the other readers it retries on preprocessed copies (zxing's
`image_variants`) when the first pass finds nothing, and it names formats as zxing-cpp does so that skills can
compare readers.
"""

from __future__ import annotations

import threading

from PIL import Image

from ..backends.packages import missing_package
from .protocols import Barcode
from .zxing_barcode import Variant, read_with_variants

__all__ = ["ZBarExpert"]

_FORMAT_NAMES = {"QRCODE": "QR Code", "EAN13": "EAN-13", "EAN8": "EAN-8", "UPCA": "UPC-A", "UPCE": "UPC-E",
                 "CODE128": "Code 128", "CODE39": "Code 39", "CODE93": "Code 93", "I25": "ITF", "CODABAR": "Codabar",
                 "DATABAR": "DataBar", "DATABAR_EXP": "DataBar Expanded"}


class ZBarExpert:
    """Calls are serialised: the library's scanner state is not documented as thread-safe."""

    def __init__(self, try_harder: bool = True, max_side: int = 2000):
        self.try_harder = try_harder
        self.max_side = max_side
        self._lock = threading.Lock()

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        if missing_package("pyzbar"):
            return "Python package 'pyzbar' is not installed (pip install pyzbar; it needs Debian's libzbar0)"
        try:
            from pyzbar import pyzbar  # noqa: F401  (loads libzbar)
        except ImportError as exc:
            return f"the ZBar library cannot be loaded ({exc}); install Debian's libzbar0"
        return None

    def decode(self, image: Image.Image) -> list[Barcode]:
        with self._lock:
            return read_with_variants(image, self._read, max_side=self.max_side, try_harder=self.try_harder)

    @staticmethod
    def _read(variant: Variant) -> list[Barcode]:
        from pyzbar import pyzbar

        found = []
        for symbol in pyzbar.decode(variant.image):
            left, top, width, height = symbol.rect
            a, b = variant.to_original((left, top)), variant.to_original((left + width, top + height))
            text = symbol.data.decode("utf-8", errors="replace")
            found.append(Barcode(text=text, format=_FORMAT_NAMES.get(symbol.type, symbol.type),
                                 box=(min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1]))))
        return found
