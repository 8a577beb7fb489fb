"""Reading the values written in table cells and questions: exact numbers (the skill API's reader), clock times.

Numbers are kept as `Fraction` so that sums of prices and probabilities stay exact and print as the benchmark
writes them (`7.60` dollars, `3/19`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from maestro_graph.numbers import first_number

__all__ = ["parse_number", "parse_time", "format_number", "format_time", "TIME_RE"]

# "8:30 A.M.", "11.15 A.M.", "2:35P.M."; the separator may be a colon or a dot.
TIME_RE = re.compile(r"(?P<h>\d{1,2})\s?[:.;]\s?(?P<m>\d{2})\s?(?P<ap>[AaPp])\.?\s?[Mm]\.?")


def parse_number(text: str) -> Fraction | None:
    """The first number written in `text` (`numbers.first_number`: sign, `$`, thousands commas, decimals, `a+b/c`,
    `a/b`), exactly; None when there is none or the text is a clock time."""
    if TIME_RE.search(text):
        return None
    found = first_number(text)
    return None if found is None else found.value


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
