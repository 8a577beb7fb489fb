"""Reading the values written in table cells and questions: exact numbers, money, mixed fractions, clock times.

Numbers are kept as `Fraction` so that sums of prices and probabilities stay exact and print as the benchmark
writes them (`7.60` dollars, `3/19`).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["number_from_match", "parse_number", "parse_time", "format_number", "format_time", "NUMBER_RE", "TIME_RE"]

# "$1,234.50", "-40", "3+1/2", "1/2", "3.8"; OCR may write the minus sign as an en dash or a Unicode minus.
NUMBER_RE = re.compile(
    r"(?P<sign>[-−–])?\s?\$?\s?(?:(?P<whole>\d+)\+(?P<num>\d+)/(?P<den>\d+)|(?P<fn>\d+)/(?P<fd>\d+)"
    r"|(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<dec>\d+))?|\.(?P<bare>\d+))"
)
# "8:30 A.M.", "11.15 A.M.", "2:35P.M."; the separator may be a colon or a dot.
TIME_RE = re.compile(r"(?P<h>\d{1,2})\s?[:.;]\s?(?P<m>\d{2})\s?(?P<ap>[AaPp])\.?\s?[Mm]\.?")


def number_from_match(m: re.Match) -> Fraction:
    if m.group("whole"):
        value = int(m.group("whole")) + Fraction(int(m.group("num")), int(m.group("den")) or 1)
    elif m.group("fn"):
        value = Fraction(int(m.group("fn")), int(m.group("fd")) or 1)
    elif m.group("bare"):
        value = Fraction("0." + m.group("bare"))
    else:
        value = Fraction(m.group("int").replace(",", "") + ("." + m.group("dec") if m.group("dec") else ""))
    return -value if m.group("sign") else value


def parse_number(text: str) -> Fraction | None:
    """The first number written in `text` (sign, `$`, thousands commas, decimals, `a+b/c`, `a/b`), else None."""
    if TIME_RE.search(text):
        return None
    m = NUMBER_RE.search(text)
    return number_from_match(m) if m else None


def parse_time(text: str) -> int | None:
    """Minutes after midnight of a clock time such as `2:35 P.M.`, else None."""
    m = TIME_RE.search(text)
    if not m:
        return None
    hour, minute = int(m.group("h")) % 12, int(m.group("m"))
    return (hour + (12 if m.group("ap").lower() == "p" else 0)) * 60 + minute


def format_time(minutes: int) -> str:
    hour, minute = divmod(minutes % (24 * 60), 60)
    return f"{(hour % 12) or 12}:{minute:02d} {'P.M.' if hour >= 12 else 'A.M.'}"


def format_number(value: Fraction, *, money: bool = False, fraction: bool = False) -> str:
    """`money` prints cents when there are any (7.60); `fraction` prints a simplified a/b; else an exact decimal."""
    if fraction and value.denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    if value.denominator == 1:
        return str(value.numerator)
    if money:
        return f"{float(value):.2f}"
    return f"{float(value):.6g}"
