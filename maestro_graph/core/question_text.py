"""Question text as it enters an episode: control characters removed, length capped.

A question reaches the policy and the skills verbatim, so invisible characters are taken out where it enters (the
graph's intake node): C0/C1 control characters other than tab and newlines, and the bidirectional overrides used to
make text read differently than it is stored. Scripts are left alone (mixed-script questions are legitimate);
the text is NFC-normalised so the same words compare equal. A question above the cap is refused, not truncated:
cutting it would silently answer a different question.

Blank means blank to a reader: nothing left once every Unicode space, format and control character and every
invisible filler is removed (`is_blank`: "\u200b\u2060\u3164" is blank). A blank question with an image is read
from the image (the graph's intake: the whole question may be in the picture); without one it is refused. Every door
(the graph's intake, which the SDK, the Agent Server, the tool and LangServe go through; the CLI and the OpenAI
route, which refuse a blank question without an image before admitting an episode) asks these functions.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["EMPTY_QUESTION", "MAX_QUESTION_CHARS", "clean_question", "is_blank", "question_problem"]

MAX_QUESTION_CHARS = 4000
"""The longest question accepted, in characters (after cleaning)."""
EMPTY_QUESTION = "the question is empty; ask something about the image, e.g. 'How many circles are there?'"
"""Why a blank question is refused: an image alone says nothing about what to find in it."""

_INVISIBLE_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]")


def clean_question(text: str) -> str:
    """The question NFC-normalised, without control characters and bidirectional overrides."""
    return _INVISIBLE_RE.sub("", unicodedata.normalize("NFC", text))


_FILLERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0") | frozenset(
    chr(c) for r in ((0x180B, 0x180F), (0xFE00, 0xFE0F), (0xE0100, 0xE01EF)) for c in range(r[0], r[1] + 1))
"""Letters and marks that show nothing: Hangul fillers, the combining grapheme joiner, Khmer inherent vowels,
variation selectors (Unicode's default-ignorable code points outside the format category) and the blank braille
pattern."""
_UNSEEN_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cf", "Cc", "Cs", "Cn"})


def is_blank(text: str) -> bool:
    """Whether nothing would be left of `text` to read once every space, format and control character and every
    invisible filler is removed."""
    return all(ch.isspace() or ch in _FILLERS or unicodedata.category(ch) in _UNSEEN_CATEGORIES for ch in text)


def question_problem(text: str, *, image: bool = False) -> str | None:
    """Why a (cleaned) question cannot be used, or None: it is longer than the cap, or blank and there is no
    `image` to read it from."""
    if is_blank(text) and not image:
        return EMPTY_QUESTION
    if len(text) > MAX_QUESTION_CHARS:
        return f"the question has {len(text):,} characters, above the cap of {MAX_QUESTION_CHARS:,}"
    return None
