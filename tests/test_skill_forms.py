"""A skill answers only what it does: for each tier-1 skill and each form of answer a question asks for (a number, a
count, yes/no, an option, free text), whether the skill answers in that form or declines (no answer, and no error).
A number for a yes/no question, a value read for a count of something else, the text read for "how many words": each
is an answer the graph would weigh as if the skill had done the work, so a skill that cannot answer a form declines
it. The table is `CELLS`, one test case per cell, each a question a user of the skill would ask, run by the real skill
with a real model of the default registry on a small image drawn here (or one of examples/); docs/extending.md shows
the same table. visual-qa needs a vision-chat model, which the default registry has none of: its row runs on a
scripted endpoint (tests/vision_double.py) that replies as chat models do, in sentences, so the row checks that the
shared vision procedure turns each reply into the asked form."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import zxingcpp
from PIL import Image, ImageDraw, ImageFont
from vision_double import VisionEndpointDouble

from maestro_graph.answer_forms import Form, has_form
from maestro_graph.numbers import parse_number
from maestro_graph.registry import Registry
from maestro_graph.registry.config import default_config_path
from maestro_graph.types import Invoke

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
Asked = Literal["number", "count", "yesno", "option", "text"]
"""The form a question asks for: a value ("What is the total?"), a count ("How many ...?"), yes or no, one of its
options, free text ("What is the title?")."""
ASKED_FORM: dict[Asked, Form] = {"number": "number", "count": "number", "yesno": "yesno", "option": "choice",
                                 "text": "text"}
"""The answer form (`maestro_graph.answer_forms`) each asked form is checked against."""


@dataclass(frozen=True)
class Cell:
    """One cell of the table: `skill` asked a question of the `asked` form, run by `model` on `image` (a name of
    the `images` fixture; None: no image), and what it does: "answers" (in that form) or "declines"."""

    skill: str
    asked: Asked
    does: Literal["answers", "declines"]
    model: str
    image: str | None
    question: str
    choices: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return f"{self.skill}-{self.asked}-{self.does}"


SHOP = ("A grand opening", "A closing sale", "A new menu")
CELLS = [
    # arithmetic: a word problem in the text, computed by the calculator
    Cell("arithmetic", "number", "answers", "sympy", None,
         "A pen costs $2 and a book costs $5. What is the total cost?"),
    Cell("arithmetic", "count", "answers", "sympy", None,
         "Tom has 3 apples and buys 5 more. How many apples does he have now?"),
    Cell("arithmetic", "yesno", "declines", "sympy", None,
         "Sam has $10 and a book costs $7. Does he have enough money to buy it?"),
    Cell("arithmetic", "option", "answers", "sympy", None,
         "Tom has 3 apples and buys 5 more. How many apples does he have now?", ("6", "8", "9")),
    Cell("arithmetic", "option", "declines", "sympy", None,
         "Tom has 3 apples and buys 5 more. True or false: he has 8 apples now.", ("True", "False")),
    Cell("arithmetic", "text", "declines", "sympy", None,
         "There are 3 red cars and 4 blue cars. Which colour has more cars?"),
    # barcode-reading: what a code encodes, its format, how many codes or characters, whether there is one
    Cell("barcode-reading", "number", "answers", "zxing", "ean", "What number does the barcode encode?"),
    Cell("barcode-reading", "count", "answers", "zxing", "qr", "How many characters are in the text the code encodes?"),
    Cell("barcode-reading", "count", "declines", "zxing", "qr", "How many people are standing next to the QR code?"),
    Cell("barcode-reading", "yesno", "answers", "zxing", "qr", "Is there a QR code in the image?"),
    Cell("barcode-reading", "option", "answers", "zxing", "qr", "What does the QR code encode?",
         ("Wikipedia", "Wikidata", "Wiktionary")),
    Cell("barcode-reading", "text", "answers", "zxing", "qr", "What does the QR code say?"),
    # chart-qa: values read off a bar chart
    Cell("chart-qa", "number", "answers", "tesseract", "chart", "What is the value of Pears?"),
    Cell("chart-qa", "count", "declines", "tesseract", "chart", "How many bars are taller than Apples?"),
    Cell("chart-qa", "yesno", "answers", "tesseract", "chart", "Is the value of Pears higher than that of Apples?"),
    Cell("chart-qa", "option", "answers", "tesseract", "chart", "What is the value of Pears?",
         ("20", "30", "50", "60")),
    Cell("chart-qa", "text", "answers", "tesseract", "labelled_chart", "Which fruit has the highest value?"),
    # counting: shapes on examples/circles.png (seven circles)
    Cell("counting", "number", "declines", "opencv-vision", "circles", "What is the radius of the largest circle?"),
    Cell("counting", "count", "answers", "opencv-vision", "circles", "How many circles are in the image?"),
    Cell("counting", "yesno", "answers", "opencv-vision", "circles", "Are there more than 3 circles?"),
    Cell("counting", "option", "answers", "opencv-vision", "circles", "How many circles are in the image?",
         ("5", "6", "7", "8")),
    Cell("counting", "text", "declines", "opencv-vision", "circles", "What colour is the largest circle?"),
    # document-fields: a receipt's total, date, shop
    Cell("document-fields", "number", "answers", "tesseract", "receipt", "What is the total?"),
    Cell("document-fields", "count", "declines", "tesseract", "receipt", "How many items were bought?"),
    Cell("document-fields", "yesno", "declines", "tesseract", "receipt", "Is the total more than 5 dollars?"),
    Cell("document-fields", "option", "answers", "tesseract", "receipt", "What is the total?",
         ("$5.70", "$3.20", "$2.50")),
    Cell("document-fields", "text", "answers", "tesseract", "receipt", "What is the name of the shop?"),
    # general-qa: a chat model over the OCR text (slow: two cells call it)
    Cell("general-qa", "count", "answers", "smollm2", "sign", 'How many letters are in the word "GRAND"?'),
    Cell("general-qa", "yesno", "answers", "smollm2", "sign", "Is the sign about a closing sale? Answer yes or no."),
    # table-qa: a price list and a frequency table
    Cell("table-qa", "number", "answers", "tesseract", "prices", "How much does a notebook cost?"),
    Cell("table-qa", "count", "answers", "tesseract", "pets", "How many students have cats?"),
    Cell("table-qa", "yesno", "answers", "tesseract", "prices",
         "Kim has $4. Does she have enough money to buy a notebook?"),
    Cell("table-qa", "yesno", "declines", "tesseract", "prices", "Is a notebook more expensive than a pencil?"),
    Cell("table-qa", "option", "answers", "tesseract", "prices", "How much does a notebook cost?", ("$1", "$2", "$5")),
    Cell("table-qa", "text", "declines", "tesseract", "prices", "Which item is the cheapest?"),
    # text-reading: a sign
    Cell("text-reading", "number", "answers", "tesseract", "sign", "How much does a shirt cost?"),
    Cell("text-reading", "count", "declines", "tesseract", "sign", "How many words are on the sign?"),
    Cell("text-reading", "yesno", "declines", "tesseract", "sign", "Is the sign about a closing sale?"),
    Cell("text-reading", "option", "answers", "tesseract", "sign", "What does the sign announce?", SHOP),
    Cell("text-reading", "text", "answers", "tesseract", "sign", "What is the title of the sign?"),
    # visual-math: a triangle ABC
    Cell("visual-math", "number", "declines", "rapidocr", "triangle", "What is the perimeter of triangle ABC?"),
    Cell("visual-math", "count", "declines", "rapidocr", "triangle", "How many triangles are in the figure?"),
    Cell("visual-math", "yesno", "answers", "rapidocr", "triangle",
         "True or false: there is a triangle ABC in the figure."),
    Cell("visual-math", "option", "answers", "rapidocr", "triangle", "Estimate the angle ABC.",
         ("30°", "60°", "90°", "120°")),
    Cell("visual-math", "text", "declines", "rapidocr", "triangle", "What is the name of this shape?"),
    # visual-qa: a vision-chat model (scripted here, see above), every form
    Cell("visual-qa", "number", "answers", "vlm", "sign", "How much does a shirt cost?"),
    Cell("visual-qa", "count", "answers", "vlm", "circles", "How many circles are in the image?"),
    Cell("visual-qa", "yesno", "answers", "vlm", "sign", "Is the sign about a closing sale?"),
    Cell("visual-qa", "option", "answers", "vlm", "sign", "What does the sign announce?", SHOP),
    Cell("visual-qa", "text", "answers", "vlm", "sign", "What is the title of the sign?"),
]
VLM_REPLIES = [
    ("announce", "The answer is A."),
    ("shirt", "A shirt costs $15."),
    ("circles", "I count 7 circles in the image."),
    ("closing sale", "No, the sign announces a grand opening."),
    ("title", "GRAND OPENING"),
]
"""How the scripted vision-chat endpoint replies, by a pattern of the question: in sentences, as chat models do."""
TIER_1 = ("arithmetic", "barcode-reading", "chart-qa", "counting", "document-fields", "general-qa", "table-qa",
          "text-reading", "visual-math", "visual-qa")
"""The tier-1 skills the table covers (checked against the registry below)."""


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _lines(path: Path, lines: list[tuple[str, int]]) -> Path:
    """Black text on white, one (text, font size) a line."""
    image = Image.new("RGB", (520, 60 + 60 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    y = 20
    for text, size in lines:
        draw.text((30, y), text, fill="black", font=_font(size))
        y += size + 24
    image.save(path)
    return path


def _table(path: Path, rows: list[tuple[str, str]]) -> Path:
    """A two-column table, its header first."""
    image = Image.new("RGB", (420, 60 + 50 * len(rows)), "white")
    draw = ImageDraw.Draw(image)
    for i, (left, right) in enumerate(rows):
        draw.text((30, 20 + 50 * i), left, fill="black", font=_font(26))
        draw.text((260, 20 + 50 * i), right, fill="black", font=_font(26))
    image.save(path)
    return path


def _bars(path: Path, axis: bool) -> Path:
    """Bars for Apples 30, Pears 50 and Plums 20, their values printed on top; with a value axis (ticks 0 to 60)
    or without one."""
    image = Image.new("RGB", (560, 420), "white")
    draw = ImageDraw.Draw(image)
    base, scale = 350, 5  # the bars' foot and pixels per unit
    if axis:
        draw.line((80, 40, 80, base), fill="black", width=2)
        draw.line((80, base, 530, base), fill="black", width=2)
        for value in range(0, 61, 20):
            y = base - value * scale
            draw.line((74, y, 80, y), fill="black")
            draw.text((30, y - 10), str(value), fill="black", font=_font(20))
    for i, (name, value, colour) in enumerate([("Apples", 30, "#1f77b4"), ("Pears", 50, "#ff7f0e"),
                                               ("Plums", 20, "#2ca02c")]):
        x, top = 120 + 140 * i, base - value * scale
        draw.rectangle((x, top, x + 80, base), fill=colour)
        draw.text((x + 22, top - 28), str(value), fill="black", font=_font(20))
        draw.text((x + 5, base + 12), name, fill="black", font=_font(20))
    image.save(path)
    return path


def _triangle(path: Path) -> Path:
    """Triangle ABC with its corners labelled (angle ABC about 60°)."""
    image = Image.new("RGB", (400, 340), "white")
    draw = ImageDraw.Draw(image)
    corners = {"A": (200, 40), "B": (60, 280), "C": (340, 280)}
    draw.polygon(list(corners.values()), outline="black", width=2)
    for name, (x, y), (dx, dy) in zip(corners, corners.values(), [(-8, -34), (-32, 0), (12, 0)]):
        draw.text((x + dx, y + dy), name, fill="black", font=_font(26))
    image.save(path)
    return path


def _ean(path: Path) -> Path:
    """An EAN-13 barcode drawn by zxing-cpp, with its quiet zones."""
    code = zxingcpp.create_barcode("4006381333931", zxingcpp.BarcodeFormat.EAN13)
    Image.fromarray(np.asarray(zxingcpp.write_barcode_to_image(code, scale=3))).convert("RGB").save(path)
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("forms")
    return {
        "sign": _lines(folder / "sign.png", [("GRAND OPENING", 44), ("Shirts $15", 30)]),
        "receipt": _lines(folder / "receipt.png", [("SUNNY MART", 30), ("Date: 12/03/2021", 22), ("Milk 2.50", 22),
                                                   ("Bread 3.20", 22), ("TOTAL 5.70", 26)]),
        "prices": _table(folder / "prices.png", [("Item", "Price"), ("pencil", "$2"), ("notebook", "$5"),
                                                 ("eraser", "$1")]),
        "pets": _table(folder / "pets.png", [("Pet", "Students"), ("Dogs", "12"), ("Cats", "8"), ("Fish", "3")]),
        "chart": _bars(folder / "chart.png", axis=True),
        "labelled_chart": _bars(folder / "labelled.png", axis=False),
        "triangle": _triangle(folder / "triangle.png"),
        "ean": _ean(folder / "ean.png"),
        "qr": EXAMPLES / "qrcode.png",
        "circles": EXAMPLES / "circles.png",
    }


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The default registry, shared by the module (each model loads once)."""
    return Registry.load(default_config_path(), cache=None)


@pytest.fixture(scope="module")
def vlm_registry(tmp_path_factory) -> Iterator[Registry]:
    """The default registry plus a vision-chat card on the scripted endpoint (visual-qa's row)."""
    with VisionEndpointDouble(replies=VLM_REPLIES) as double:
        path = tmp_path_factory.mktemp("vlm") / "registry.yaml"
        path.write_text(f"""extends: default
models:
  - name: vlm
    description: A vision-language chat model (a scripted endpoint here).
    capabilities: [vision-chat]
    backend: {{type: openai, base_url: "{double.url}", model: vlm-double, max_tokens: 64}}
""")
        yield Registry.load(path, cache=None)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_a_skill_answers_the_asked_form_or_declines(registry, vlm_registry, images, cell):
    runner = vlm_registry if cell.model == "vlm" else registry
    choices = list(cell.choices) if cell.choices else None
    step = runner.run(Invoke(cell.model, cell.skill), question=cell.question,
                      images=[str(images[cell.image])] if cell.image else [], choices=choices)
    assert step.error is None, step.error
    if cell.does == "declines":
        assert step.answer is None and step.confidence == 0.0, (step.answer, step.evidence)
        return
    assert has_form(step.answer, ASKED_FORM[cell.asked], choices), (step.answer, step.evidence)
    if cell.asked == "count":  # a count is a whole number
        count = parse_number(step.answer)
        assert count is not None and count >= 0 and count.is_integer(), step.answer
    if cell.asked == "text":  # a name or a title, not a bare number
        assert not has_form(step.answer, "number", None), step.answer


def test_the_table_covers_every_tier_1_skill_and_form(registry):
    """Every tier-1 skill of the default registry has a row, and every row a cell for each form (general-qa, whose
    chat model takes seconds a call, only its count and yes/no cells)."""
    assert {skill.name for skill in registry.tier1} == set(TIER_1)
    covered = {(c.skill, c.asked) for c in CELLS}
    forms = set(ASKED_FORM)
    for skill in TIER_1:
        expected = {"count", "yesno"} if skill == "general-qa" else forms
        assert {asked for name, asked in covered if name == skill} == expected, skill
