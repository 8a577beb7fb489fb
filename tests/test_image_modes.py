"""Images of more than 8 bits per sample are scaled to 8 bits, not clipped: a 16-bit greyscale PNG is not read as
a white page (which experts would then answer about confidently)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from maestro_graph.experts.zxing_barcode import ZXingBarcodeExpert
from maestro_graph.images.load import load_image

QR = Path(__file__).resolve().parents[1] / "examples" / "qrcode.png"


def test_16_bit_greyscale_png_keeps_dark_pixels_dark(tmp_path):
    values = np.array([[0, 1000, 5000], [20000, 40000, 65535]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")  # PIL reads it as 16-bit integer data
    image = load_image(str(tmp_path / "deep.png"))
    assert image.mode == "RGB"
    assert np.asarray(image)[..., 0].tolist() == [[0, 3, 19], [78, 156, 255]]  # the high byte of each value
    assert all(np.ptp(np.asarray(image), axis=2).ravel() == 0)  # still grey


def test_a_16_bit_qr_code_is_read(tmp_path):
    grey = np.asarray(Image.open(QR).convert("L"), dtype=np.uint16) * 257  # the same picture on 0..65535
    Image.fromarray(grey).save(tmp_path / "qr16.png")
    image = load_image(str(tmp_path / "qr16.png"))
    assert np.array_equal(np.asarray(image.convert("L")), np.asarray(Image.open(QR).convert("L")))
    assert [c.text for c in ZXingBarcodeExpert().decode(image)] == ["Wikipedia"]


@pytest.mark.parametrize("values, expected", [
    (np.array([[0, 256, 70000, -5]], dtype=np.int32), [[0, 1, 255, 0]]),  # "I": 16-bit range, clipped
    (np.array([[0.0, 0.2, 1.0]], dtype=np.float32), [[0, 51, 255]]),  # "F" within 0..1: scaled by 255
    (np.array([[0.0, 100.0, 300.0]], dtype=np.float32), [[0, 100, 255]]),  # "F" beyond 1: read as 0..255
])
def test_32_bit_integer_and_float_images_are_scaled(tmp_path, values, expected):
    Image.fromarray(values).save(tmp_path / "deep.tiff")
    assert Image.open(tmp_path / "deep.tiff").mode in ("I", "F")
    assert np.asarray(load_image(str(tmp_path / "deep.tiff")))[..., 0].tolist() == expected
