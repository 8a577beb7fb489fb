"""Parsing an LM router's completion into one action. Parsing is separate from validating: a well-formed
`<search> N: input </search>` names option N of the prompt, `<search> model@@skill: input </search>` a pair by its
id; either becomes an `Invoke` whatever the pair (the registry then says whether the pair exists), and everything
that is not exactly one well-formed action becomes an `InvalidAction` with the reason the policy reads next. The
first well-formed action is executed; nothing is guessed or fuzzily matched."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...types import Answer, InvalidAction, Invoke, split_pair

__all__ = ["answer_text", "parse_action", "search_text"]

MAX_QUOTED = 120
"""Characters of a malformed completion quoted back in the error observation."""

_TAG = re.compile(r"<(/?)(search|answer|information)\s*>", re.IGNORECASE)


def search_text(target: str, request: str = "") -> str:
    """The canonical text of an invoke action (what a well-formed router writes): `target` is an option number of
    the prompt, or a pair id."""
    return f"<search> {target}: {request.strip()} </search>" if request.strip() else f"<search> {target} </search>"


def answer_text(answer: str | None) -> str:
    return f"<answer> {answer if answer is not None else ''} </answer>"


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_QUOTED else flat[: MAX_QUOTED - 3] + "..."


def parse_action(text: str, options: Sequence[str] = ()) -> Invoke | Answer | InvalidAction:
    """The first well-formed action of `text`; `options` are the pair ids of the prompt's numbered options, in
    order (option 1 first). A tag is well-formed when it is closed by its own closing tag before any other tag
    opens; `<information>` written by the model, a nested, unterminated or stray closing tag before the first
    well-formed action, an empty answer, a number that is no option and a search whose content is neither a number
    nor a `model@@skill` id are invalid."""
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
    if pair.strip().isdigit():
        number = int(pair)
        if not 1 <= number <= len(options):
            listed = f"1-{len(options)}" if options else "none"
            return InvalidAction(text, f"expert {number} is not listed (listed: {listed}); write the number of a "
                                       "listed expert")
        pair = options[number - 1]
    try:
        model, skill = split_pair(pair)
    except ValueError as exc:
        return InvalidAction(text, f"{exc} in <search>; write <search> MODEL@@SKILL: REQUEST </search>")
    return Invoke(model, skill, request.strip())

