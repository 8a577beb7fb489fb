"""How an episode ends with an answer: the answer rules (`final_answer`, which the trainers also use to value an
ending without running it) and the answer node, which gives the answer with its confidence and files the episode
in the thread's `episodes`."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import uuid4

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from ..answer_forms import asks_yes_no, expected_form, has_form
from ..choices import YES_NO_GUESS, guess_option
from ..errors import ConfigError
from ..images.sources import ImageRefused
from ..policy import best_candidate
from ..types import Step, StopReason, stop_text
from .confidence import answer_confidence, confidence_features
from .context import MaestroContext
from .endings import stop_update, voided
from .image_refs import fetched
from .parts import GraphParts
from .state import AnswerSource, EpisodeRecord, MaestroState, step_record
from .written_state import BadState, WrittenState, read_state

__all__ = ["answer", "final_answer"]


def final_answer(question: str, choices: Sequence[str] | None, answer: str | None,
                 steps: Sequence[Step]) -> tuple[str | None, AnswerSource | None]:
    """The answer an episode of `question` (with `choices`) ends with after `steps`, given the policy's `answer`, for
    every policy and for the trainers that value an ending without running it. The policy's answer, unless it gave
    none or the question fixes the form and the answer is not in it (options, or an explicit "answer yes or no"):
    then the best-supported candidate in the form the question asks for (an option, yes/no, a short number, any
    text), marked `candidate`; then, with nothing of that form, a marked `guess` where one has a prior (among a
    choice question's options, `YES_NO_GUESS` for a yes/no question). A form read only from the wording does not
    overrule the policy ("Is it odd or even?" opens like a yes/no question). A question nothing answered in its
    form, with no prior, stays without an answer."""
    choices = list(choices) if choices else None
    form = expected_form(question, choices)
    fixed = form == "choice" or (form == "yesno" and asks_yes_no(question))
    if answer is not None and (not fixed or has_form(answer, form, choices)):
        return answer, "policy"
    said = best_candidate([s for s in steps if has_form(s.answer, form, choices)])
    if said is not None:
        return said, "candidate"
    if form == "choice":
        assert choices is not None  # a question has the choice form only with options (`expected_form`)
        evidence = [t for s in steps if not s.error for t in (s.answer, s.evidence) if t]
        return guess_option(choices, evidence, question), "guess"
    if form == "yesno":
        return YES_NO_GUESS, "guess"
    return None, None


def answer(state: MaestroState, runtime: Runtime[MaestroContext], *, parts: GraphParts) -> dict:
    """End the episode: a typed `error` event first when its input was at fault (so a caller sees the reason, not
    just a missing answer), the answer event, and the episode appended to the thread's `episodes` (the latest
    `episodes_kept` of them). An answer less sure than the run's `min_confidence` is withheld: the episode ends
    for low confidence, so a caller can escalate. The answer is also the run's `reply`, an AI message whose
    `response_metadata` holds its source, confidence and stop (appended to `messages` when the run came as chat), so
    LangGraph's `messages` stream mode sends it whatever the input."""
    update: dict = {}
    try:
        written = read_state(state)  # a Command may have written any field and jumped here
    except BadState as exc:  # what the state holds is not to be read: the episode ends on the input error, emptied
        written = WrittenState(question=state.get("question") if isinstance(state.get("question"), str) else "",
                               **stop_update(StopReason.INPUT_ERROR, exc))
        update = voided(exc)
    stop = StopReason(written.get("stop") or StopReason.POLICY)
    reason = written.get("stop_reason") or stop_text(stop)
    question, choices, steps = written.get("question") or "", written.get("choices"), written.get("steps") or []
    judged: dict = {"confidence": None, "confidence_basis": None}
    withheld: dict = {}
    context = _settings(runtime, stop)
    if stop == StopReason.INPUT_ERROR:
        runtime.stream_writer({"event": "error", "kind": "input", "message": written.get("stop_detail") or ""})
        final, source = written.get("answer"), None  # the input must be fixed: a guess would hide that
    else:
        final, source = final_answer(question, choices, written.get("answer"), steps)
        judged = _judged(written, runtime, parts, final, source)
        floor = context.min_confidence
        if final is not None and judged["confidence"] < floor:  # withheld: the caller escalates
            withheld = stop_update(StopReason.LOW_CONFIDENCE, f"the answer's confidence "
                                   f"{_shown_below(judged['confidence'], floor)} is below min_confidence {floor:g}")
            stop, reason, final, source = StopReason.LOW_CONFIDENCE, withheld["stop_reason"], None, None
    runtime.stream_writer({"event": "answer", "answer": final, "answer_source": source,
                           "confidence": judged["confidence"], "stop": stop.value, "stop_reason": reason})
    record = EpisodeRecord(question=question, choices=choices, answer=final, answer_source=source,
                           confidence=judged["confidence"], stop_reason=reason, steps=[step_record(s) for s in steps])
    kept = context.episodes_kept
    earlier = list(state.get("episodes") or [])
    update |= {"answer": final, "answer_source": source, **judged, **withheld, "stop": stop.value,
               "stop_reason": reason,
               "episodes": [record] if len(earlier) < kept else Overwrite([*earlier, record][-kept:]),
               "choices": None, "history": []}  # both belong to this question only
    said = final if final is not None else (
        f"I could not find out ({reason})" if stop == StopReason.LOW_CONFIDENCE else f"(no answer: {reason})")
    # who gave the answer and how sure it is ride on the message, as a chat model's logprobs do
    update["reply"] = AIMessage(content=said, id=str(uuid4()), response_metadata={
        "answer_source": source, "confidence": judged["confidence"], "stop": stop.value, "stop_reason": reason})
    if state.get("messages"):  # the same message (one id): the `messages` stream mode sends it once
        update["messages"] = [update["reply"]]
    return update


def _settings(runtime: Runtime[MaestroContext], stop: StopReason) -> MaestroContext:
    """The run's settings; an episode that ended on an input error may have ended on them (a ConfigError), and is
    filed under the defaults."""
    try:
        return MaestroContext.of(runtime.context)
    except ConfigError:
        if stop != StopReason.INPUT_ERROR:
            raise
        return MaestroContext()


def _judged(written: WrittenState, runtime: Runtime[MaestroContext], parts: GraphParts, final: str | None,
            source: AnswerSource | None) -> dict:
    """The answer's confidence and what it was computed from, at most the episode's `confidence_cap`; nothing for no
    answer."""
    if final is None:
        return {"confidence": None, "confidence_basis": None}
    try:
        images = fetched(runtime.store, written.get("images") or [])
    except ImageRefused:  # expired from the store: judged without them, their descriptors missing from the features
        images = []
    basis = confidence_features(parts.registry, written.get("question") or "", images, written.get("choices"),
                                written.get("steps") or [], final, source)
    judged = answer_confidence(parts.confidence, basis)
    cap = written.get("confidence_cap")  # a follow-up's answer is no surer than the earlier answers it came from
    return {"confidence": round(judged if cap is None else min(judged, cap), 4), "confidence_basis": basis}


def _shown_below(value: float, floor: float) -> str:
    """`value` with as many decimals as it takes to read as below `floor`: two decimals round 0.986 up to "0.99", and
    the stop reason read "0.99 is below min_confidence 0.99"."""
    for digits in range(2, 8):
        shown = f"{value:.{digits}f}"
        if float(shown) < floor:
            return shown
    return repr(value)
