"""Barcodes and 2D codes written with zxing-cpp (linear codes, QR, Data Matrix, Aztec, PDF417), placed on a label
with other printed text, then scaled, rotated and degraded. The answer is the symbol's text as zxing encodes it."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import cast

from PIL import Image

from .base import Draft, ask, canvas, degrade, font

# format name -> (what the question calls it, content maker)
_DIGITS = string.digits
_FORMATS: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "QRCode": ("QR code", lambda rng: rng.choice((
        f"https://example.com/{''.join(rng.choice(string.ascii_lowercase) for _ in range(6))}",
        f"ORDER-{rng.randint(1000, 99999)}", f"Hello {rng.choice(('World', 'Maestro', 'there'))}"))),
    "DataMatrix": ("Data Matrix code", lambda rng: f"LOT{rng.randint(100000, 999999)}"),
    "Aztec": ("Aztec code", lambda rng: f"TICKET {rng.randint(100, 999)}-{rng.randint(1000, 9999)}"),
    "PDF417": ("PDF417 barcode", lambda rng: f"ID:{rng.randint(10 ** 8, 10 ** 9 - 1)}"),
    "Code128": ("barcode", lambda rng: "".join(rng.choice(string.ascii_uppercase + _DIGITS) for _ in range(8))),
    "Code39": ("barcode", lambda rng: "".join(rng.choice(string.ascii_uppercase + _DIGITS) for _ in range(6))),
    "Code93": ("barcode", lambda rng: "".join(rng.choice(string.ascii_uppercase + _DIGITS) for _ in range(7))),
    "EAN13": ("barcode", lambda rng: "".join(rng.choice(_DIGITS) for _ in range(12))),
    "EAN8": ("barcode", lambda rng: "".join(rng.choice(_DIGITS) for _ in range(7))),
    "ITF": ("barcode", lambda rng: "".join(rng.choice(_DIGITS) for _ in range(2 * rng.randint(3, 7)))),
}

QUESTIONS: dict[str, tuple[str, ...]] = {
    "decode": (
        "What is the value encoded in this {kind}?",
        "Decode the {kind} in the image. What text does it contain?",
        "What does the {kind} say when scanned?",
        "Read the {kind}: what data is stored in it?",
    ),
}


def make(rng: random.Random) -> Draft:
    import zxingcpp

    name = rng.choice(sorted(_FORMATS))
    kind, content = _FORMATS[name]
    barcode = zxingcpp.create_barcode(content(rng), getattr(zxingcpp.BarcodeFormat, name))
    symbol = Image.fromarray(barcode.to_image(scale=rng.randint(2, 4))).convert("RGB")
    label_font = font(rng, rng.randint(14, 22))
    caption = rng.choice(("SCAN ME", "Product label", "Batch 7", "Shipping", "Item", "Ref."))
    margin = rng.randint(20, 80)
    width = max(symbol.width, int(label_font.getlength(caption))) + 2 * margin
    height = symbol.height + 2 * margin + cast(int, label_font.size) + 10  # the font was made at a whole size
    image, draw = canvas(width, height, tuple(rng.randint(225, 255) for _ in range(3)))
    image.paste(symbol, ((width - symbol.width) // 2, margin))
    draw.text((width / 2, margin + symbol.height + 10), caption, fill=(30, 30, 30), font=label_font, anchor="mt")
    image = degrade(image, rng, noise=8, max_rotation=rng.choice((0, 3, 10)), blur=0.5)
    question = ask(rng, QUESTIONS["decode"], "text", kind=rng.choice((kind, "code")))
    return Draft(question, barcode.text, "text", "decode", [image])
