"""Tier-1 general QA on a text-only chat model: OCR text of the images as context, a short answer parsed back.

The SKILL.md body is the system message. The model never sees pixels: when the episode has images and the registry
has an OCR model, the text read in them is passed in the user message. Replies of small models ramble, so the
answer is cut down to what the question asks for: an option, a number when it asks for a quantity, else the first
line without a restatement of the question (none when the reply only restates it).

A follow-up question ("How many letters does it have?") continues a conversation: the earlier questions and answers
(`ctx.history`) go to the model as the chat they were. Counting the letters, characters, words or digits of a given
text (quoted in the question, or the previous answer a follow-up points back to) is computed, not asked: small chat
models read tokens, not letters, and miscount.
"""

from __future__ import annotations

import re

from maestro_graph.answer_forms import expected_form
from maestro_graph.numbers import first_number
from maestro_graph.registry.context import SkillContext
from maestro_graph.scoring import choice_label, letters_only, normalize_text, option_labels, yes_no_in
from maestro_graph.types import SkillResult

MAX_CONTEXT_CHARS = 1500
"""OCR text passed to the model is cut to this many characters (small models have short, weak context)."""
MAX_EVIDENCE_CHARS = 300
CONFIDENCE = 0.2
"""A small chat model's answer is a weak guess: the policy should prefer a specialised skill's answer."""
COUNTED_CONFIDENCE = 0.9
"""A count computed over a given text is exact; only which text the question means can be wrong."""
MAX_TURN_CHARS = 300
"""Each earlier question and answer passed to the model is cut to this many characters."""
ECHO_WORDS = 6
"""A restated answer of this many words or more that adds at most one word of its own to the question's says
nothing."""
_FUNCTION_WORDS = frozenset("a an the this that these those is are was were be has have had of in on at to for with by "
                            "and or it its which who what".split())

_NUMBER_QUESTION_RE = re.compile(
    r"\b(how (many|much|long|far|old|tall)|what (is|was) the (total|sum|difference|number|value|cost|price|area|"
    r"length|perimeter|average|mean|median|percentage|ratio)|calculate|compute)\b",
    re.I,
)
_ANSWER_IS_RE = re.compile(r"\b(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.I)
_RESTATED_RE = re.compile(r"^(?P<subject>.+?)\s+(?:is|are|was|were)\s+(?P<rest>.+)$", re.I)
_COUNT_RE = re.compile(r"\bhow many (letters|characters|chars|words|digits)\b", re.I)
_QUOTED_RE = re.compile(r"(?:^|(?<=\s))[\"“'‘]([^\"“”'‘’\n]+)[\"”'’](?!\w)")  # not the ' of "John's"
_REFERS_BACK_RE = re.compile(r"\b(it|its|that|this|the (answer|word|name|text|result))\b", re.I)
_UNITS = {
    "letters": str.isalpha,
    "characters": lambda ch: not ch.isspace(),
    "chars": lambda ch: not ch.isspace(),
    "digits": str.isdigit,
}


def _ocr_context(ctx: SkillContext) -> str:
    """Text read in every image, or "" when the episode has no image or the registry no OCR model."""
    if not ctx.image_refs or "ocr" not in ctx.registry.skills or ctx.registry.model_with("ocr") is None:
        return ""
    pages = [ctx.use("ocr", image=image).text for image in ctx.images]
    text = "\n\n".join(f"[image {i + 1}]\n{page}" if len(pages) > 1 else page for i, page in enumerate(pages))
    return text[:MAX_CONTEXT_CHARS]


def _user_message(question: str, choices: list[str] | None, context: str) -> str:
    parts = []
    if context.strip():
        parts.append(f"Text in the image:\n{context.strip()}\n")
    parts.append(f"Question: {question.strip()}")
    if choices:
        if not letters_only(choices):
            parts.append("Options:\n" + "\n".join(f"{choice_label(i)}. {c}" for i, c in enumerate(choices)))
        parts.append("Reply with the letter of the correct option.")
    return "\n".join(parts)


def _short_answer(reply: str, question: str) -> str | None:
    """The answer stated in a free-text reply: after "the answer is" when present, else the first line; Yes or No
    for a yes/no question (none when the reply says neither: "The sign is about a sale" is no answer to "Is the
    sign about a sale?"); a number when the question asks for a quantity."""
    text = reply.strip()
    said = _ANSWER_IS_RE.search(text)
    if said:
        text = said.group(1)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return None
    if expected_form(question, None) == "yesno":
        verdict = yes_no_in(line) or yes_no_in(reply)
        return verdict.capitalize() if verdict else None
    if _NUMBER_QUESTION_RE.search(question):
        number = first_number(line) or first_number(text)
        if number is not None:
            return number.text.lstrip("$")
    return _drop_restatement(line.rstrip(".").strip(), question) or None


def _drop_restatement(line: str, question: str) -> str | None:
    """"The capital of France is Paris" -> "Paris" when the words before "is" restate the question; None when the
    words after it restate the question too ("The group that has the highest value in 2008 is the group that has the
    highest value in 2010" to "Which group has the highest value in 2008?": a long rest that adds at most one word
    of its own to the question's and function words)."""
    match = _RESTATED_RE.match(line)
    if not match:
        return line
    asked = set(re.findall(r"[a-z0-9]+", question.lower())) | _FUNCTION_WORDS
    subject = {w for w in re.findall(r"[a-z0-9]+", match.group("subject").lower()) if len(w) > 3}
    if not subject or not subject <= asked:
        return line
    rest = re.findall(r"[a-z0-9]+", match.group("rest").lower())
    return None if len(rest) >= ECHO_WORDS and len(set(rest) - asked) <= 1 else match.group("rest")


def _label_re(labels: list[str]) -> re.Pattern:
    """A label standing alone in a reply ("B", "(B)", "AB."), longest first so that "AB" is not read as "A"."""
    alternatives = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    return re.compile(rf"(?:^|[\s(\[])({alternatives})(?:[)\].:,]|\s|$)", re.I)


def _pick_option(reply: str, choices: list[str]) -> str | None:
    """The option a reply names: by its letter, else the only option whose text it contains. Returns the option
    text, or its letter when the options are letters."""
    letters = option_labels(choices)
    label = _label_re(letters)
    said = _ANSWER_IS_RE.search(reply)  # "A. 50°  The answer is D." -> the concluding letter wins
    match = label.search(said.group(1) if said else reply.strip()) or label.search(reply.strip())
    if match:
        return choices[letters.index(match.group(1).upper())]
    text = normalize_text(reply)
    named = [c for c in choices if len(normalize_text(c)) > 1 and normalize_text(c) in text]
    return named[0] if len(named) == 1 else None


def _counted(question: str, history: list) -> SkillResult | None:
    """The exact count of letters (characters, words, digits) of the text a question names: quoted in it, else the
    previous answer when the question points back to it ("How many letters does it have?"). None when the question
    asks no such count or names no text."""
    asked = _COUNT_RE.search(question)
    if not asked:
        return None
    quoted = _QUOTED_RE.search(question)
    earlier = next((t["answer"] for t in reversed(history) if t.get("answer")), None)
    if quoted:
        text, source = quoted.group(1), "quoted in the question"
    elif earlier and _REFERS_BACK_RE.search(question):
        text, source = earlier, "the previous answer"
    else:
        return None
    unit = asked.group(1).lower()
    count = len(text.split()) if unit == "words" else sum(map(_UNITS[unit], text))
    return SkillResult(evidence=f"{text!r} ({source}) has {count} {unit}", answer=str(count),
                       confidence=COUNTED_CONFIDENCE)


def _conversation(history: list) -> list[dict[str, str]]:
    """The earlier turns as the chat they were: each question, then the answer it got (when it got one)."""
    messages = []
    for turn in history:
        messages.append({"role": "user", "content": f"Question: {turn['question'][:MAX_TURN_CHARS]}"})
        if turn.get("answer"):
            messages.append({"role": "assistant", "content": turn["answer"][:MAX_TURN_CHARS]})
    return messages


def run(ctx: SkillContext) -> SkillResult:
    question = ctx.request
    if not ctx.choices:
        counted = _counted(question, ctx.history)
        if counted is not None:
            return counted
    context = _ocr_context(ctx)
    messages = [
        {"role": "system", "content": ctx.instructions},
        *_conversation(ctx.history),
        {"role": "user", "content": _user_message(question, ctx.choices, context)},
    ]
    reply = ctx.model.chat(messages).text
    answer = _pick_option(reply, ctx.choices) if ctx.choices else _short_answer(reply, question)
    evidence = f"{ctx.model.name} replied: {reply[:MAX_EVIDENCE_CHARS]!r}"
    if context:
        evidence += f" (given {len(context)} characters of OCR text)"
    return SkillResult(evidence=evidence, answer=answer, confidence=CONFIDENCE if answer else 0.0)
