"""What a question's text says about where its answer is: whether a text read from an image is a question at all,
and whether a question is a written calculation that needs no image.

A blank question sent with an image is read from the image (intake), and the text read becomes the question only
when it is one: a question mark, a question or command word first ("What", "How", "Is", "Count", "Find"...), a
written calculation, or options. Anything else (the "OOO" that OCR reads off three circles) is no question, and
answering it would answer a fragment of the picture. A written calculation ("What is 12 + 30?", "(3 + 4) x 5 = ?")
stands alone: the episode routes on its text, without the image, so no image skill answers a number it reads there.
"""

from __future__ import annotations

import re

from ..choices import inline_choices

__all__ = ["reads_as_question", "routed_images", "written_calculation"]

_OPENERS = re.compile(
    r"^\W*(what|what's|whats|which|who|whom|whose|when|where|why|how|is|are|was|were|do|does|did|can|could|will|"
    r"would|should|has|have|had|count|find|compute|calculate|evaluate|solve|name|list|give|tell|identify|determine|"
    r"estimate|read|describe)\b", re.I)
_NUMBER = r"\d+(?:[.,]\d+)*"
_CALCULATION = re.compile(
    rf"^\s*(?:(?:what|how much)\s+is|what's|compute|calculate|evaluate|work out|find)?\s*"
    rf"(?P<expr>[(\s]*{_NUMBER}[\s)]*(?:[-+*/×÷x^][(\s]*{_NUMBER}[\s)]*)+)\s*(?:=\s*\??)?\s*[?.!]?\s*$", re.I)


def written_calculation(question: str) -> bool:
    """Whether the whole question is a calculation written out ("What is 12 + 30?", "17 * 23 = ?"), which its text
    answers without an image."""
    return _CALCULATION.match(question) is not None


def routed_images(question: str, images: list[str]) -> list[str]:
    """The images an episode routes with: none for a written calculation (it stands alone, so no image skill
    answers a number it reads there), else all of them."""
    return [] if written_calculation(question) else images


def reads_as_question(text: str) -> bool:
    """Whether a text read from an image asks something: a question mark, a question or command word first, a
    written calculation, or options ("A. 3 B. 5")."""
    text = text.strip()
    return bool(text) and ("?" in text or _OPENERS.match(text) is not None or written_calculation(text)
                           or bool(inline_choices(text)))
