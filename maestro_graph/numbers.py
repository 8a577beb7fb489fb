"""Numbers written in text: the one reader that scoring, answer forms and every skill use, part of the skill API.

A number is read as it is written: an optional sign (`-`, the Unicode minus, an en dash OCR often gives for it, `+`),
an optional currency (`$`, `€`, `£`, `RM`), then a mixed number `3+1/2`, a fraction `3/4`, a whole number with
optional thousands commas, decimals and exponent (`1,234.50`, `.5`, `1e3`), then a suffix `k`/`M`/`B` or a percent
(`%`, `percent`, `per cent`). The value keeps what the digits say, exactly (`Fraction`, so sums of prices stay
exact); the percent and the suffix are flags beside it (`Number.scaled` applies the suffix), since whether "45%" is
45 or 0.45 and whether "5m" is five million or five metres is the reader's question, not the parser's.

What is not one number: a sign glued to a word or a number on its left (the `-` of "5-10" or "x-5" is a dash: 5 and
10 are read), a fraction that is part of a date (`12/25/2020` reads 12, 25, 2020), a fraction over zero.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Number", "numbers_in", "first_number", "whole_number", "parse_number", "SUFFIXES"]

SUFFIXES = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
"""What a suffix written right after the digits multiplies by, in `Number.scaled` ("2.5M", "10k")."""

_SIGN = r"(?:(?<![\w.])(?P<sign>[-−–+]))?"
_CURRENCY = r"(?:(?P<currency>[$€£]|\b(?i:rm))\s?)?"
_FRACTION = r"(?<!\d/)(?P<fn>\d+)/(?P<fd>0*[1-9]\d*)(?![/\d])"
_MIXED = r"(?P<whole>\d+)\+(?P<mn>\d+)/(?P<md>0*[1-9]\d*)(?![/\d])"
_DECIMAL = r"(?:(?P<int>{digits})(?:\.(?P<dec>\d+))?|\.(?P<bare>\d+))(?:[eE](?P<exp>[-+]?\d+))?"
_GROUPED, _PLAIN = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+", r"\d+"
_AFTER = r"(?:(?P<suffix>[kKmMbB])(?![A-Za-z])|\s?(?P<percent>%|(?i:percent|per cent)\b))?"


def _pattern(signed: bool, grouped: bool) -> re.Pattern:
    body = f"(?:{_MIXED}|{_FRACTION}|{_DECIMAL.format(digits=_GROUPED if grouped else _PLAIN)})"
    return re.compile(rf"(?<![\d.]){_SIGN if signed else ''}{_CURRENCY}{body}{_AFTER}")


_PATTERNS = {(signed, grouped): _pattern(signed, grouped) for signed in (True, False) for grouped in (True, False)}
_LATEX_FRAC_RE = re.compile(r"\\d?frac\{([^{}]+)\}\{([^{}]+)\}")


@dataclass(frozen=True)
class Number:
    """One number as written at `text[start:end]` (sign, currency, percent and suffix included in the span)."""

    value: Fraction
    """The digits' value with the sign: '$1,234.50' is 1234.5, '45%' is 45, '2.5M' is 2.5, '3+1/2' is 7/2."""
    start: int
    end: int
    text: str
    currency: str | None = None
    """'$', '€', '£' or 'RM' (upper case) when one is written before the digits."""
    percent: bool = False
    suffix: str | None = None
    """'k', 'm' or 'b' (lower case) when written right after the digits."""
    fraction: bool = False
    """Written as a fraction or a mixed number ('3/4', '3+1/2')."""

    @property
    def scaled(self) -> float:
        """The value with its suffix applied ('2.5M' -> 2500000.0); percent stays as written."""
        return float(self.value) * SUFFIXES.get(self.suffix or "", 1)


def _number(m: re.Match) -> Number:
    groups = m.groupdict()
    if groups["whole"]:
        value = int(groups["whole"]) + Fraction(int(groups["mn"]), int(groups["md"]))
    elif groups["fn"]:
        value = Fraction(int(groups["fn"]), int(groups["fd"]))
    else:
        digits = (groups["int"] or "0").replace(",", "") + "." + (groups["dec"] or groups["bare"] or "0")
        value = Fraction(digits + (f"e{groups['exp']}" if groups["exp"] else ""))
    if groups.get("sign") and groups["sign"] != "+":
        value = -value
    currency = groups["currency"].upper() if groups["currency"] else None
    return Number(value, m.start(), m.end(), m.group(0), currency, bool(groups["percent"]),
                  groups["suffix"].lower() if groups["suffix"] else None, bool(groups["whole"] or groups["fn"]))


def numbers_in(text: str, *, signed: bool = True, grouped: bool = True) -> list[Number]:
    """Every number written in `text`, in order. `signed=False` reads no sign (a word problem's "5-year-old" or a
    figure's "-" are dashes); `grouped=False` reads no thousands commas ("(100,200)" is two numbers, a pair)."""
    return [_number(m) for m in _PATTERNS[signed, grouped].finditer(text)]


def first_number(text: str, *, signed: bool = True, grouped: bool = True) -> Number | None:
    """The first number written in `text`, else None."""
    m = _PATTERNS[signed, grouped].search(text)
    return _number(m) if m else None


def whole_number(text: str) -> Number | None:
    """The number when `text` is one number and nothing else, else None. White space and a bracket on either side
    are allowed: a label "(35%)", which OCR may also split into "(35%" and its neighbour's ")"."""
    core = text.strip()
    core = core[1:] if core[:1] in ("(", "[") else core
    core = core[:-1] if core[-1:] in (")", "]") else core
    m = _PATTERNS[True, True].fullmatch(core.strip())
    return _number(m) if m else None


def parse_number(text: str | float | int | None) -> float | None:
    """The number a short answer states, as scoring reads it: '$1,234.5' -> 1234.5, '45%' -> 45, '3/4' -> 0.75,
    '\\frac{3}{4}' -> 0.75, '{7}' -> 7; the first number when it states several; None when it states none."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    s = unicodedata.normalize("NFKC", str(text))
    s = _LATEX_FRAC_RE.sub(lambda m: f"{m.group(1).strip()}/{m.group(2).strip()}", s)
    found = first_number(s.replace(" / ", "/"))
    return None if found is None else float(found.value)
