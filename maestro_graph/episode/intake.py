"""The intake node: where every run with input starts an episode, and the input checks every door relies on are
made before any expert runs."""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime
from langgraph.types import Command, Overwrite
from pydantic import ValidationError

from ..choices import inline_choices
from ..core.question_text import EMPTY_QUESTION, clean_question, is_blank, question_problem
from ..errors import ConfigError, InputError
from ..images.sources import ImageRefused
from ..registry import Registry
from ..types import Step, StopReason, Turn
from .context import MaestroContext
from .conversation import conversation_images, history, human_parts, spoken
from .endings import stop_update
from .followups import Followup, Unresolved, computed, resolve
from .image_refs import stored, verified
from .parts import GraphParts
from .state import ANSWER, ROUTER, MaestroState, fresh_run, step_record
from .written_question import reads_as_question, routed_images
from .written_state import INPUT_FIELDS, read_state

__all__ = ["intake", "read_question"]


def intake(state: MaestroState, runtime: Runtime[MaestroContext], *,
           parts: GraphParts) -> Command[Literal["router", "answer"]]:
    """Start an episode. Every run with input comes here (LangGraph drops an interrupted run's pending work when new
    input arrives), so the question is this run's: a trailing human message (chat), else `question`; the previous
    episode's steps, answer and stop reason are cleared (`state.fresh_run`; it stays in `episodes`). Control
    characters leave the question; under an image-source policy every image becomes a verified data URL or the run
    ends with the refusal. The input checks every door relies on are made here, once, before any expert runs: what a
    client wrote (`read_state`, its own `history` included), the run context (`MaestroContext.of`: here, since a
    follow-up and a question read from the image are worked out before any router) and the question
    (`question_problem`: too long, or blank without an image); a failed one ends the run with an input error. The
    nodes after intake trust what it wrote (what a client's `Command` writes past it is checked by
    `episode.past_intake`). A
    blank question with an image is read from the image (`Registry.read_text`, the episode's first step) and routed
    on what was read; nothing read is the input error. A follow-up about earlier answers ("What is double that
    number?") is computed from the conversation (`episode.followups`), or refused when it names an answer the
    conversation cannot supply."""
    messages = state.get("messages") or []
    chat = bool(messages) and isinstance(messages[-1], HumanMessage)
    if chat:
        question, sent = human_parts(messages[-1])
    else:
        question, sent = state.get("question") or "", state.get("images") or []  # a list once read_state passed
    question = clean_question(question) if isinstance(question, str) else ""
    update: dict = dict(fresh_run(question))
    try:
        read_state(state, INPUT_FIELDS)
        turns = _history(state)
        update["history"] = spoken(turns)
        images = conversation_images(sent, turns, messages[:-1] if chat else [], state.get("thread_images") or [])
        MaestroContext.of(runtime.context)
        _check(question_problem(question, image=bool(images)))
    except (InputError, ConfigError) as exc:
        # `images: []`: a wrong value a client wrote there must not stop the thread's next question too
        return Command(goto=ANSWER, update={**update, "images": [], **stop_update(StopReason.INPUT_ERROR, exc)})
    followup = None if is_blank(question) else resolve(question, turns)
    if isinstance(followup, Unresolved):  # it names an earlier answer the conversation cannot supply: ask back
        return Command(goto=ANSWER, update={**update, **stop_update(StopReason.INPUT_ERROR, followup.reason)})
    if followup is not None:  # about what was said, not the image: computed from the conversation
        return Command(goto=ANSWER, update={**update, **_from_conversation(parts.registry, followup, runtime)})
    try:
        images = verified(runtime.store, images, parts.image_sources)
    except ImageRefused as exc:
        return Command(goto=ANSWER, update={**update, "images": [], **stop_update(StopReason.INPUT_ERROR, exc)})
    update["images"] = stored(runtime.store, images)
    if images:
        update["thread_images"] = update["images"]
    if is_blank(question):  # the whole question is in the picture: read it, then route on it
        update |= _read_from(parts.registry, images, runtime)
        if update.get("stop"):
            return Command(goto=ANSWER, update=update)
    update["images"] = routed_images(update["question"], update["images"])
    if not state.get("choices"):  # options written in the question are its choices
        update["choices"] = inline_choices(update["question"])
    return Command(goto=ROUTER, update=update)


def _history(state: MaestroState) -> list[Turn]:
    """The conversation the question continues (`conversation.history`); a client's malformed `history` is an
    InputError naming its first problems."""
    try:
        return history(state)
    except ValidationError as exc:
        raise InputError("; ".join(f"history.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                   for e in exc.errors()[:3])) from None


def _check(problem: str | None) -> None:
    if problem:
        raise InputError(problem)


def _from_conversation(registry: Registry, followup: Followup, runtime: Runtime[MaestroContext]) -> dict:
    """The update of a follow-up about earlier answers (episode.followups): the resolved question, the calculator's
    step as the episode's one step, no image; the answer node gives its value as the answer, no surer than the
    earlier answers it was computed from (`confidence_cap`)."""
    step = computed(followup, registry.calculate(followup.expression))
    runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
    return {"question": followup.question, "images": [], "choices": None, "steps": Overwrite([step_record(step)]),
            "confidence_cap": followup.confidence_cap,
            **stop_update(StopReason.POLICY, "answered from the conversation")}


def read_question(registry: Registry, images: list[str]) -> tuple[Step, str, str | None]:
    """A blank question read from its image: the reading (the episode's first step), the text read (the question
    the episode routes on), and why that text cannot be taken for a question (nothing read, or a text that is no
    question, `reads_as_question`: the "OOO" read off three circles), else None."""
    step = registry.read_text(images)
    question = "" if step.error else clean_question(step.evidence).strip()
    problem = question_problem(question)
    if problem:
        problem = f"{problem}; and no question could be read from the image ({step.error or 'no text found'})"
    elif not reads_as_question(question):
        problem = (f"{EMPTY_QUESTION}; the text read from the image ({question[:80]!r}) is not a question (no "
                   "question mark or word, calculation or options), so it is not taken for one")
    return step, question, problem


def _read_from(registry: Registry, images: list[str], runtime: Runtime[MaestroContext]) -> dict:
    """The update of a blank question read from its image (`read_question`): the text read becomes the question,
    the reading the episode's first step; a text that cannot be taken for a question ends the episode with the
    input error."""
    step, question, problem = read_question(registry, images)
    runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
    update = {"question": question, "steps": Overwrite([step_record(step)])}
    if problem:
        update |= stop_update(StopReason.INPUT_ERROR, problem)
    return update
