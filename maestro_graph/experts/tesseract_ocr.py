"""Tesseract 5 (Debian `tesseract-ocr`): good on dense document text and long lines, weaker on small scene text."""

from __future__ import annotations

import shutil

from PIL import Image

from ..backends.packages import missing_package
from .protocols import TextBox

__all__ = ["TesseractExpert"]


class TesseractExpert:
    """Word boxes from `pytesseract.image_to_data`, merged into lines by Tesseract's own line ids."""

    def __init__(self, lang: str = "eng", psm: int = 11, min_confidence: float = 30.0):
        self.lang = lang
        self.psm = psm
        self.min_confidence = min_confidence

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        if shutil.which("tesseract") is None:
            return "the `tesseract` binary is not on PATH (install Debian package tesseract-ocr)"
        if missing_package("pytesseract"):
            return "Python package 'pytesseract' is not installed"
        return None

    def ocr(self, image: Image.Image) -> list[TextBox]:
        import pytesseract

        data = pytesseract.image_to_data(
            image.convert("RGB"), lang=self.lang, config=f"--psm {self.psm}", output_type=pytesseract.Output.DICT
        )
        lines: dict[tuple, list[int]] = {}
        for i, word in enumerate(data["text"]):
            if word.strip() and float(data["conf"][i]) >= self.min_confidence:
                key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
                lines.setdefault(key, []).append(i)
        boxes: list[TextBox] = []
        for idx in lines.values():
            x0 = min(data["left"][i] for i in idx)
            y0 = min(data["top"][i] for i in idx)
            x1 = max(data["left"][i] + data["width"][i] for i in idx)
            y1 = max(data["top"][i] + data["height"][i] for i in idx)
            text = " ".join(data["text"][i].strip() for i in idx)
            conf = sum(float(data["conf"][i]) for i in idx) / len(idx) / 100
            boxes.append(TextBox(text, (float(x0), float(y0), float(x1), float(y1)), conf))
        return boxes
