"""Options written inline in a question ("A. 30°; B. 60°", "(a) ... (b) ...", one per line) read as choices, and the
prior guess among them when no expert named one.

A multiple-choice question whose options sit in its text is still multiple-choice: the graph's intake turns them into
`choices` (when the task gave none), so the answer node can always pick an option, and scoring can match a letter
or an option's text. Reading options out of ordinary text would be worse than missing them (a two-part question
"compute (a) the area and (b) the perimeter" is not a choice), so a block of labels counts only when all of this
holds:

- the labels are consecutive letters from A (`A`, `B`, `C`...; one case and one style per block: `(A)`, `A.`, `A:`
  or `A)`), at least `MIN_OPTIONS` of them, each at the start of a line or after white space or `;`/`,`;
- the block is introduced: `A` opens a line, or follows `:` `?` `.` or a choice cue ("choices", "options",
  "choose", "select", "answer"), so "Plan A: ... Plan B: ..." and "point A. Then B." stay text;
- every option is non-empty, at most `MAX_OPTION_CHARS` long and, except the last, on one line (the last runs to
  the end of its line, so a trailing instruction is not part of it).

When several blocks qualify the last one wins (some benchmarks repeat the options). Unlabelled lists ("30, 60 or
90") and numbered labels ("(1) ... (2) ...") are left as text: they are too common in ordinary questions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from .numbers import parse_number
from .scoring import choice_label, normalize_text, score

__all__ = ["MAX_OPTION_CHARS", "MIN_OPTIONS", "YES_NO_GUESS", "guess_option", "inline_choices", "names_option",
           "question_stem"]

MIN_OPTIONS = 2
MAX_OPTION_CHARS = 200
YES_NO_GUESS = "no"
"""The answer to a yes/no question no expert answered. A prior, not evidence: statements put to a reader to verify
are false more often than true (counted on the real dev items: docs/results.md, "Priors in the code")."""

_STYLES = (
    re.compile(r"(?:^|(?<=[\s;,]))\(([A-H])\)", re.M),
    re.compile(r"(?:^|(?<=[\s;,]))\(([a-h])\)", re.M),
    re.compile(r"(?:^|(?<=[\s;,]))([A-H])\.(?!\w\.)", re.M),  # not "U.S.A." style abbreviations
    re.compile(r"(?:^|(?<=[\s;,]))([A-H]):", re.M),
    re.compile(r"(?:^|(?<=[\s;,]))([A-H])\)", re.M),
    re.compile(r"(?:^|(?<=[\s;,]))([a-h])[.:)]", re.M),
)
_CUE_RE = re.compile(r"(choices?|options?|choose|select|answers?)\s*$", re.IGNORECASE)
_SEPARATORS = " \t;,|"


def _introduced(before: str) -> bool:
    """Whether the text before a block's `A` label introduces options (see the module docstring)."""
    line = before.rsplit("\n", 1)[-1]
    if not line.strip():
        return True
    tail = before.rstrip()
    return tail.endswith((":", "?", ".")) or bool(_CUE_RE.search(tail))


def _clean(option: str) -> str:
    option = option.strip(_SEPARATORS + "\n")
    return re.sub(r"\s+or$", "", option).strip(_SEPARATORS)


def _block(text: str, labels: list[re.Match], start: int) -> tuple[int, list[str]] | None:
    """Where the block whose `A` is labels[start] ends, and its options; None when it does not qualify."""
    run = [labels[start]]
    for match in labels[start + 1:]:
        if match.group(1).upper() != choice_label(len(run)):
            break
        run.append(match)
    if len(run) < MIN_OPTIONS or not _introduced(text[:run[0].start()]):
        return None
    line_end = text.find("\n", run[-1].end())
    ends = [m.start() for m in run[1:]] + [len(text) if line_end < 0 else line_end]
    options = [_clean(text[m.end():end]) for m, end in zip(run, ends)]
    if any(not o or len(o) > MAX_OPTION_CHARS or "\n" in o for o in options):
        return None
    return ends[-1], options


def _inline_block(question: str) -> tuple[int, int, list[str]] | None:
    """(start, end, options) of the last qualifying block of options in the question, or None."""
    found: list[tuple[int, int, list[str]]] = []
    for style in _STYLES:
        labels = list(style.finditer(question))
        for i, match in enumerate(labels):
            if match.group(1).upper() == "A":
                block = _block(question, labels, i)
                if block:
                    found.append((match.start(), *block))
    return max(found, key=lambda f: f[0]) if found else None


def inline_choices(question: str) -> list[str] | None:
    """The options written in the question's text (without their labels), or None when it has none."""
    block = _inline_block(question)
    return block[2] if block else None


def question_stem(question: str) -> str:
    """The question without its inline options (as `inline_choices` reads them): what a skill that reads quantities
    out of the text must read, so that option values are not taken for the problem's givens."""
    block = _inline_block(question)
    return question if block is None else (question[:block[0]] + question[block[1]:]).strip()


def names_option(text: str | None, choices: Sequence[str]) -> bool:
    """Whether an answer names one of the options, by letter or by text (as scoring reads it)."""
    options = list(choices)
    return text is not None and any(score(text, option, "choice", choices=options) for option in options)


def guess_option(choices: Sequence[str], evidence: list[str], question: str) -> str:
    """A prior pick among options when no expert named one: the option nearest a number the experts stated (an
    angle read as 58 picks "60°"), else the option sharing most words of three letters or more with what they
    returned (shorter ones match by accident: the article "a" is not option "a"); among options still tied, and
    with nothing to go on that is all of them, one drawn uniformly by a digest of the question and the options.
    So a guess scores chance over many questions instead of inheriting where a benchmark tends to put the right
    option (taking the first scored below chance on a source whose answers are rarely the first), and the same
    question always gets the same guess."""
    options = list(choices)
    numbers = [n for n in (parse_number(e) for e in evidence) if n is not None]
    values = [parse_number(o) for o in options]
    if numbers and any(v is not None for v in values):
        def distance(i: int) -> float:
            v = values[i]
            return float("inf") if v is None else min(abs(v - n) for n in numbers)
        return options[min(range(len(options)), key=distance)]
    words = {w for w in normalize_text(" ".join(evidence)).split() if len(w) >= 3}
    overlap = [len(words & set(normalize_text(o).split())) for o in options]
    best = max(overlap)
    tied = [o for o, n in zip(options, overlap) if n == best]
    draw = hashlib.sha256("\x1f".join([question, *options]).encode()).digest()
    return tied[int.from_bytes(draw[:8], "big") % len(tied)]
