"""Question text as it enters an episode: control characters removed, length capped.

A question reaches the policy and the skills verbatim, so invisible characters are taken out where it enters (the
graph's intake node): C0/C1 control characters other than tab and newlines, and the bidirectional overrides used to
make text read differently than it is stored. Scripts are left alone (mixed-script questions are legitimate);
the text is NFC-normalised so the same words compare equal. A question above the cap is refused, not truncated:
cutting it would silently answer a different question. A blank question is refused too, images or not: every
door (the graph's intake, which the SDK, the Agent Server, the tool and LangServe go through; the CLI and the OpenAI
route, which refuse before admitting an episode) asks this one function.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["EMPTY_QUESTION", "MAX_QUESTION_CHARS", "clean_question", "question_problem"]

MAX_QUESTION_CHARS = 4000
"""The longest question accepted, in characters (after cleaning)."""
EMPTY_QUESTION = "the question is empty; ask something about the image, e.g. 'How many circles are there?'"
"""Why a blank question is refused: an image alone says nothing about what to find in it."""

_INVISIBLE_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]")


def clean_question(text: str) -> str:
    """The question NFC-normalised, without control characters and bidirectional overrides."""
    return _INVISIBLE_RE.sub("", unicodedata.normalize("NFC", text))


def question_problem(text: str) -> str | None:
    """Why a (cleaned) question cannot be used, or None: it is blank, or longer than the cap."""
    if not text.strip():
        return EMPTY_QUESTION
    if len(text) > MAX_QUESTION_CHARS:
        return f"the question has {len(text):,} characters, above the cap of {MAX_QUESTION_CHARS:,}"
    return None
