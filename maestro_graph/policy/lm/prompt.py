"""The LM router's conversation, generated from the registry's cards: never hand-written per registry, so a new card
or skill folder changes the prompt and nothing else.

A conversation is OpenAI-format messages: the system prompt (the experts it may call as numbered options, each with
what its skill's and its model's cards say, the action format, the rules), the user turn (question, options, image
references), then per step the action the router took (assistant) and what came back (user, fenced in
`<information>`). The same function renders serving, training rollouts and exported trajectories, so they cannot
drift apart.

The router calls an expert by its number (`<search> 3 </search>`), and the numbers carry no identity: training shuffles
them per question (`PromptOptions.shuffle`), so the only way to pick the barcode reader is to read that it reads
barcodes, and an expert added after training is picked by its card like any other.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ...registry.pair import Pair
from ...scoring import choice_label
from ...types import Step
from .parser import answer_text, search_text

__all__ = [
    "PromptOptions",
    "assistant_text",
    "conversation",
    "final_answer_message",
    "information",
    "option_labels",
    "option_pairs",
    "system_prompt",
    "user_text",
    "with_images",
]


@dataclass(frozen=True)
class PromptOptions:
    """Length limits of the generated prompt (small models have short contexts), and the order of its options."""

    card_chars: int = 200
    """Characters of each card description shown (cut at a word boundary)."""
    observation_chars: int = 600
    """Characters of each observation's evidence shown in `<information>`."""
    order: Literal["pair-ids", "registry", "ranked"] = "registry"
    """How the experts are offered. `registry`: numbered options in the registry's order, called by number.
    `ranked`: numbered options sorted by a score per pair, best first (`option_pairs`: the reach's measured accuracy
    on similar questions, or an LM router's `order` ranker's opening probabilities), so option 1 is the expert the
    scores favour and the router reads the cards to tell when another fits better; a 135M model picks far more
    reliably from a ranked list than from ten lines in an arbitrary order. `pair-ids`: the prompt of routers trained
    before numbered options (skills, models and valid pairs listed apart, pairs called by id), which such a router
    reads as it was trained."""
    measured: bool = False
    """Each numbered option also says how its pair did on the calibration questions most like this one (the
    registry's reach: `measured_accuracy`), where that was measured: the LM router reads what the neural policy
    reads, so an expert added and profiled after training is told apart by its figure, not only its card."""
    shuffle: int | None = None
    """Salt of a per-question shuffle of the option numbers (training: an expert's number then says nothing about
    it, only its text does); None numbers them in the registry's order (serving: one fixed order per registry)."""

    @property
    def numbered(self) -> bool:
        """Experts are numbered options, called by number (every order but `pair-ids`)."""
        return self.order != "pair-ids"

    @property
    def ranked(self) -> bool:
        return self.order == "ranked"

    @property
    def reads_reach(self) -> bool:
        """The prompt depends on the pairs' measured accuracy on similar questions (shown, or ranking the options),
        so rendering it needs the registry's reach, and training hides some pairs' figures (profile_dropout)."""
        return self.measured or self.ranked

    def __post_init__(self) -> None:
        if self.card_chars < 20 or self.observation_chars < 20:
            raise ValueError("card_chars and observation_chars must be at least 20 (they cut card texts and evidence)")
        if self.measured and not self.numbered:
            raise ValueError("measured figures are shown on numbered options, not with order `pair-ids`")


_FENCE = re.compile(r"</?\s*(search|answer|information)\s*>", re.IGNORECASE)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 3].rsplit(" ", 1)[0]
    return cut + "..."


def _fenced(text: str) -> str:
    """Expert text cannot open or close the router's tags: `<answer>` inside evidence becomes `[answer]`."""
    return _FENCE.sub(lambda m: f"[{m.group(0).strip('<>').strip()}]", text)


def option_pairs(pairs: Sequence[Pair], question: str, choices: Sequence[str] | None,
                 options: PromptOptions = PromptOptions(), accuracy: Mapping[str, float] | None = None) -> list[Pair]:
    """The experts the prompt lists, in the order of their numbers (option N is item N-1): the pairs whose skill does
    not decline the question from its text (`SkillSpec.declines`: the graph never offers them), in the given order,
    or shuffled by `options.shuffle` and the question (every episode of one question and salt reads the same numbers,
    so a GRPO group's episodes are compared under one prompt), then, with `options.ranked`, sorted by `accuracy`
    (best first, stably; unscored pairs last). The list depends on the question alone, not on the turn, so a
    number means the same expert all through an episode. The pair-id prompt (order `pair-ids`) lists every pair, as
    routers reading it were trained before skills could decline a question and choose otherwise when shown a
    shorter list; the graph still never runs a declined pair, since only valid
    actions are scored."""
    listed = [p for p in pairs if not (options.numbered and p.skill.declines(question, choices))]
    if options.shuffle is not None:
        digest = hashlib.sha256(f"{options.shuffle}\n{question}".encode()).digest()
        random.Random(int.from_bytes(digest[:8], "big")).shuffle(listed)
    if options.ranked:
        measured = accuracy or {}
        listed.sort(key=lambda p: -measured.get(p.id, -1.0))
    return listed


def option_labels(listed: Sequence[str], options: PromptOptions = PromptOptions()) -> dict[str, str]:
    """Pair id -> its option number as the router writes it, for the pair ids `listed` in option order (none without
    numbered options: pairs are then called by id)."""
    return {pair: str(i) for i, pair in enumerate(listed, start=1)} if options.numbered else {}


def _pairs_prompt(pairs: Sequence[Pair], max_turns: int, options: PromptOptions) -> str:
    """The prompt without numbered options (order `pair-ids`)."""
    skills = {p.skill.name: p.skill for p in pairs}
    models = {p.model.name: p.model for p in pairs}
    lines = [
        ("You are a router. You answer a question about images by calling expert pairs MODEL@@SKILL and reading "
         "their results; you cannot see the images yourself."),
        "",
        "Skills:",
        *(f"- {name}: {_clip(spec.description, options.card_chars)}" for name, spec in sorted(skills.items())),
        "",
        "Models:",
        *(f"- {name} ({', '.join(card.capabilities)}): {_clip(card.description, options.card_chars)}"
          for name, card in sorted(models.items())),
        "",
        "Valid pairs: " + ", ".join(p.id for p in pairs),
        "",
        *_format_lines("MODEL@@SKILL", "call a pair", "use only valid pairs", max_turns),
    ]
    return "\n".join(lines)


def _format_lines(target: str, call: str, rule: str, max_turns: int) -> list[str]:
    """The action format and the rules, the tail of both prompts (`target` is what a search names)."""
    return [
        "Each turn write exactly one action and nothing else:",
        search_text(target, "REQUEST") + f"  ({call}; an empty REQUEST passes the question)",
        answer_text("ANSWER") + "  (final answer: a number, a word or an option)",
        "Results come back as <information> ... </information>.",
        f"Rules: {rule}; answer as soon as a result answers the question; at most {max_turns} calls.",
    ]


def _figure(pair: str, accuracy: Mapping[str, float], options: PromptOptions) -> str:
    """What an option line says of the pair's measured accuracy on similar questions (nothing where unmeasured)."""
    if not options.measured or pair not in accuracy:
        return ""
    return f" [{round(100 * accuracy[pair])}% right on similar questions]"


def system_prompt(listed: Sequence[Pair], max_turns: int, options: PromptOptions = PromptOptions(),
                  accuracy: Mapping[str, float] | None = None) -> str:
    """The router's instructions: `listed` (numbered in this order, `option_pairs`) with what each one's skill and
    model cards say (and, with `options.measured`, its `accuracy` on similar questions), the action format and the
    rules."""
    if not options.numbered:
        return _pairs_prompt(listed, max_turns, options)
    lines = [
        ("You are a router. You answer a question about images by calling experts and reading their results; you "
         "cannot see the images yourself. Pick an expert by what it says it does: the numbers change between "
         "questions."),
        "",
        "Experts:",
        *(f"{i}. {p.skill.name} by {p.model.name}: {_clip(p.skill.description, options.card_chars)} "
          f"{_clip(p.model.description, options.card_chars)}{_figure(p.id, accuracy or {}, options)}"
          for i, p in enumerate(listed, start=1)),
        "",
        *_format_lines("N", "call expert N", "call only listed experts", max_turns),
    ]
    return "\n".join(lines)


def user_text(question: str, choices: Sequence[str] | None, n_images: int) -> str:
    """The question turn. Images are referenced by position (`<image 1>`); their pixels go to the experts."""
    parts = [f"Question: {question.strip()}"]
    if choices:
        parts.append("Options: " + "; ".join(f"({choice_label(i)}) {c}" for i, c in enumerate(choices)))
    if n_images:
        parts.append("Images: " + " ".join(f"<image {i + 1}>" for i in range(n_images)))
    return "\n".join(parts)


def assistant_text(step: Step, labels: dict[str, str]) -> str:
    """What the router wrote to cause `step`: its raw text for an output that was no action, else the canonical
    action (the pair's option number in `labels`; the pair id for a pair the prompt did not list)."""
    if not step.model and not step.skill:
        return step.input
    return search_text(labels.get(step.pair, step.pair), step.input)


def information(step: Step, turns_left: int, options: PromptOptions = PromptOptions()) -> str:
    """The observation of one step, fenced and truncated."""
    if step.error:
        body = f"error ({step.error_kind or 'unknown'}): {_clip(step.error, options.observation_chars)}"
    else:
        answer = "none" if step.answer is None else step.answer
        body = (f"{step.pair} answer: {_fenced(answer)} (confidence {step.confidence:.2f})\n"
                f"evidence: {_fenced(_clip(step.evidence, options.observation_chars))}")
    return f"<information> {body}\nturns left: {max(0, turns_left)} </information>"


def conversation(
    question: str,
    choices: Sequence[str] | None,
    n_images: int,
    steps: Sequence[Step],
    pairs: Sequence[Pair],
    max_turns: int,
    options: PromptOptions = PromptOptions(),
    accuracy: Mapping[str, float] | None = None,
) -> list[dict]:
    """System, user, then an assistant action and an information turn per step; `pairs` are listed as
    `option_pairs` numbers them (ranked by their `accuracy` on similar questions where `options.ranked`), with that
    accuracy shown where `options.measured`."""
    listed = option_pairs(pairs, question, choices, options, accuracy)
    labels = option_labels([p.id for p in listed], options)
    messages = [
        {"role": "system", "content": system_prompt(listed, max_turns, options, accuracy)},
        {"role": "user", "content": user_text(question, choices, n_images)},
    ]
    for turn, step in enumerate(steps, start=1):
        messages.append({"role": "assistant", "content": assistant_text(step, labels)})
        messages.append({"role": "user", "content": information(step, max_turns - turn, options)})
    return messages


def final_answer_message(answer: str | None) -> dict:
    return {"role": "assistant", "content": answer_text(answer)}


def with_images(messages: Sequence[dict], images: Sequence) -> list[dict]:
    """The conversation in the content-part form a vision-language processor renders: each turn's text as a text
    part, and the question's images (PIL) as image parts ahead of the first user turn's text. That is where TRL's
    `prepare_multimodal_messages` puts a dataset's images, so a rollout, an SFT example and TRL's own forward pass
    render one prompt with the same image tokens."""
    out, placed = [], False
    for message in messages:
        parts: list[dict] = [{"type": "text", "text": message["content"]}]
        if message["role"] == "user" and not placed:
            parts = [*({"type": "image", "image": image} for image in images), *parts]
            placed = True
        out.append({**message, "content": parts})
    return out
