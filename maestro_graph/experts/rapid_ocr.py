"""RapidOCR 3.x (PP-OCR ONNX models shipped in the wheel): strong on clean rendered and scene text."""

from __future__ import annotations

import threading

import numpy as np
from PIL import Image

from ..backends.packages import missing_package
from ..core.environment import OMP_NUM_THREADS
from .protocols import TextBox

__all__ = ["RapidOCRExpert"]


class RapidOCRExpert:
    """PP-OCR detection + recognition. Each calling thread gets its own engine, loaded on its first call (~1 s): one
    engine object is not safe to call from two threads, and one engine per thread lets concurrent episodes use
    every core (the card's `concurrency` bounds how many run at once)."""

    def __init__(self, min_confidence: float = 0.3, threads: int | None = None):
        self.min_confidence = min_confidence
        self.threads = threads or int(OMP_NUM_THREADS.read() or 0) or -1
        self._local = threading.local()

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        missing = missing_package("rapidocr", "onnxruntime")
        return f"Python package {missing!r} is not installed" if missing else None

    def _get_engine(self):
        engine = getattr(self._local, "engine", None)
        if engine is None:
            from rapidocr import RapidOCR

            # onnxruntime ignores OMP_NUM_THREADS: pass the thread count explicitly (-1 = all cores)
            engine = self._local.engine = RapidOCR(params={
                "Global.log_level": "critical",
                "EngineConfig.onnxruntime.intra_op_num_threads": self.threads,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            })
        return engine

    def ocr(self, image: Image.Image) -> list[TextBox]:
        import cv2

        # RapidOCR takes BGR like OpenCV: one copy of the pixels and one conversion (not three copies at full size)
        bgr = cv2.cvtColor(np.asarray(image if image.mode == "RGB" else image.convert("RGB")), cv2.COLOR_RGB2BGR)
        result = self._get_engine()(bgr)
        if result is None or result.boxes is None or result.txts is None:
            return []
        boxes: list[TextBox] = []
        for quad, text, score in zip(result.boxes, result.txts, result.scores):
            if not text or not text.strip() or float(score) < self.min_confidence:
                continue
            xs = [float(p[0]) for p in quad]
            ys = [float(p[1]) for p in quad]
            boxes.append(TextBox(text.strip(), (min(xs), min(ys), max(xs), max(ys)), float(score)))
        return boxes
