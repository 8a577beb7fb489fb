"""Parsing an LM router's completion into one action. Parsing is separate from validating: a well-formed
`<search> model@@skill: input </search>` becomes an `Invoke` whatever the pair (the registry then says whether the
pair exists), and everything that is not exactly one well-formed action becomes an `InvalidAction` with the reason
the policy reads next. The first well-formed action is executed; nothing is guessed or fuzzily matched."""

from __future__ import annotations

import re

from ...types import Answer, InvalidAction, Invoke, split_pair

__all__ = ["answer_text", "parse_action", "search_text"]

MAX_QUOTED = 120
"""Characters of a malformed completion quoted back in the error observation."""

_TAG = re.compile(r"<(/?)(search|answer|information)\s*>", re.IGNORECASE)


def search_text(pair: str, request: str = "") -> str:
    """The canonical text of an invoke action (what a well-formed router writes)."""
    return f"<search> {pair}: {request.strip()} </search>" if request.strip() else f"<search> {pair} </search>"


def answer_text(answer: str | None) -> str:
    return f"<answer> {answer if answer is not None else ''} </answer>"


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_QUOTED else flat[: MAX_QUOTED - 3] + "..."


def parse_action(text: str) -> Invoke | Answer | InvalidAction:
    """The first well-formed action of `text`. A tag is well-formed when it is closed by its own closing tag before
    any other tag opens; `<information>` written by the model, a nested, unterminated or stray closing tag before
    the first well-formed action, an empty answer, and a search whose content is not a `model@@skill` id are
    invalid."""
    tags = list(_TAG.finditer(text))
    if not tags:
        return InvalidAction(text, f"no <search> or <answer> tag in your output {_quote(text)!r}; write exactly one "
                                   "action: <search> MODEL@@SKILL: REQUEST </search> or <answer> ANSWER </answer>")
    first = tags[0]
    closing, name = first.group(1) == "/", first.group(2).lower()
    if closing:
        return InvalidAction(text, f"</{name}> closes a tag that was never opened")
    if name == "information":
        return InvalidAction(text, "<information> is written by the environment; write <search> or <answer>")
    if len(tags) < 2 or tags[1].group(2).lower() != name or tags[1].group(1) != "/":
        what = "is not closed" if len(tags) < 2 else f"is interrupted by {tags[1].group(0)} (tags do not nest)"
        return InvalidAction(text, f"<{name}> {what}; close it with </{name}>")
    content = text[first.end():tags[1].start()].strip()
    if name == "answer":
        if not content:
            return InvalidAction(text, "the answer is empty; write <answer> ANSWER </answer>")
        return Answer(content)
    pair, _, request = content.partition(":")
    try:
        model, skill = split_pair(pair)
    except ValueError as exc:
        return InvalidAction(text, f"{exc} in <search>; write <search> MODEL@@SKILL: REQUEST </search>")
    return Invoke(model, skill, request.strip())

