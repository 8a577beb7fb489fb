"""Tier-1 barcode questions: what is encoded, which format, how many codes, is there one, how many characters
(digits, letters) the encoded text has.

The decoding is the model's (through the tier-2 `barcode` skill); this file only reads what the question asks for and
picks the code it is about. Retail codes are answered in GTIN-13 form because engines disagree on UPC-A: zxing-cpp
reports it as a 13-digit EAN-13 with a leading 0, OpenCV as 12 digits; GTIN-13 is the form product databases use.
"""

from __future__ import annotations

import re

from maestro_graph.experts.protocols import Barcode
from maestro_graph.registry.context import SkillContext
from maestro_graph.scoring import normalize_text
from maestro_graph.types import SkillResult

MAX_EVIDENCE_TEXT = 120
"""Decoded texts longer than this are shortened in the evidence (the answer keeps them whole)."""

_KINDS = {  # words a question may use for a kind of code -> a pattern over format names
    r"\bqr\b": r"qr",
    r"\bdata\s*matrix\b": r"data ?matrix",
    r"\baztec\b": r"aztec",
    r"\bpdf\s*417\b": r"pdf ?417",
    r"\b(ean|upc|isbn)\b": r"ean|upc",
    r"\bcode\s*128\b": r"code ?128",
    r"\bcode\s*39\b": r"code ?39",
}
_HOW_MANY = r"\b(?:how many|number of|count(?: the)?)\s+"
_COUNT_RE = re.compile(_HOW_MANY + r"(?:[\w-]+\s+){0,2}?(?:codes?|barcodes?|symbols?)\b", re.I)
"""Counting codes: the counted noun is a code ("How many QR codes..."), not something the question says of a code."""
_LENGTH_RE = re.compile(_HOW_MANY + r"(characters|letters|digits)\b", re.I)
"""Counting what the encoded text is made of ("How many characters are in the text the code encodes?")."""
_ANY_COUNT_RE = re.compile(_HOW_MANY, re.I)
_EXISTS_RE = re.compile(
    r"^\s*(is|are) there\b|^\s*(does|do) (the|this|these) (image|picture|photo)s? (contain|have|show)", re.I
)
_CODE_RE = re.compile(r"\b(codes?|barcodes?|qr|symbols?|data\s*matrix|aztec|pdf\s*417|ean|upc|isbn)\b", re.I)
_DECODE_RE = re.compile(r"\b(encod\w*|decod\w*|scan\w*)\b", re.I)
"""A question about codes names one or speaks of decoding: "Is there a dog?" or "Which year had the highest
revenue?" is not asking this skill (which would answer "no", or a code's digits)."""
_FORMAT_RE = re.compile(r"\b(format|symbology|type|kind)\b", re.I)
_VALUE_RE = re.compile(r"\b(encoded|encode|value|text|content|contents|says?|read|data|url|link|digits)\b", re.I)


def _intent(question: str) -> str:
    """What the question asks for: "count", "length", "exists", "format" or "value" (the default); "other" for a
    question that neither names a code nor speaks of decoding one ("Is there a dog?"), or that counts something
    else ("How many people stand by the QR code?"), which this skill declines."""
    if not _CODE_RE.search(question) and not _DECODE_RE.search(question):
        return "other"
    if _COUNT_RE.search(question):
        return "count"
    if _LENGTH_RE.search(question):
        return "length"
    if _ANY_COUNT_RE.search(question):
        return "other"
    if _EXISTS_RE.search(question):
        return "exists"
    if _FORMAT_RE.search(question) and not _VALUE_RE.search(question):
        return "format"
    return "value"


def _gtin13(code: Barcode) -> str:
    if code.format == "UPC-A" and len(code.text) == 12 and code.text.isdigit():
        return "0" + code.text
    return code.text


def _length(text: str, unit: str) -> int:
    """How many characters (every one, spaces included), letters or digits `text` has."""
    if unit == "letters":
        return sum(c.isalpha() for c in text)
    if unit == "digits":
        return sum(c.isdigit() for c in text)
    return len(text)


def _area(code: Barcode) -> float:
    return 0.0 if code.box is None else (code.box[2] - code.box[0]) * (code.box[3] - code.box[1])


def _kind_pattern(question: str) -> str | None:
    return next((fmt for words, fmt in _KINDS.items() if re.search(words, question, re.I)), None)


def _describe(codes: list[Barcode]) -> str:
    parts = []
    for code in codes:
        text = code.text if len(code.text) <= MAX_EVIDENCE_TEXT else code.text[:MAX_EVIDENCE_TEXT] + "..."
        where = "" if code.box is None else " at ({:.0f}, {:.0f}, {:.0f}, {:.0f})".format(*code.box)
        parts.append(f"{code.format} {text!r}{where}")
    return "; ".join(parts)


def _pick_choice(answer: str, choices: list[str]) -> str | None:
    """The option that states the answer: equal after normalising, else the only option containing it."""
    target = normalize_text(answer)
    options = [normalize_text(c) for c in choices]
    for choice, option in zip(choices, options):
        if option == target:
            return choice
    containing = [c for c, o in zip(choices, options) if target and (target in o or o in target) and o]
    return containing[0] if len(containing) == 1 else None


NOT_ABOUT_CODES = "the question asks about something other than codes and what they encode"


def declines(request: str, choices: list[str] | None) -> str | None:
    """A question about something other than codes is declined before any decoding."""
    return NOT_ABOUT_CODES if _intent(request) == "other" else None


def run(ctx: SkillContext) -> SkillResult:
    question = ctx.request
    intent = _intent(question)
    if intent == "other":
        return SkillResult(evidence=NOT_ABOUT_CODES, answer=None, confidence=0.0)
    codes = [code for image in ctx.images for code in ctx.use("barcode", image=image)]
    kind = _kind_pattern(question)
    of_kind = [c for c in codes if kind is None or re.search(kind, c.format, re.I)]
    found = f": {_describe(codes)}" if codes else " (none found)"
    evidence = f"{ctx.model.name} decoded {len(codes)} code(s){found}"
    if intent == "count":
        answer, confidence = str(len(of_kind)), (0.8 if codes else 0.3)  # a code the model missed is uncounted
    elif intent == "exists":
        answer, confidence = ("yes", 0.9) if of_kind else ("no", 0.5)
    elif not codes:
        return SkillResult(evidence=evidence, answer=None, confidence=0.0)
    else:
        main = max(of_kind or codes, key=_area)
        answer = main.format if intent == "format" else _gtin13(main)
        confidence = 0.95 if len(of_kind or codes) == 1 else 0.75
        if intent == "length":
            answer = str(_length(answer, _LENGTH_RE.search(question).group(1).lower()))  # type: ignore[union-attr]

    if ctx.choices:
        picked = _pick_choice(answer, ctx.choices)
        if picked is None:
            return SkillResult(evidence=f"{evidence}; no option matches {answer!r}", answer=None, confidence=0.0)
        answer = picked
    return SkillResult(evidence=evidence, answer=answer, confidence=confidence, details={"intent": intent})
