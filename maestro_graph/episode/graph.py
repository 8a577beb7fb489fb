"""The decision process as a LangGraph StateGraph: router (the policy) -> one node per tier-1 skill -> router ...
-> answer -> END. One factory builds it from a registry and a policy; the same graph serves the CLI, evaluation,
rollouts, HTTP and LangGraph Studio."""

from __future__ import annotations

import hashlib
import operator
import time
from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal, Mapping

import numpy as np
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer, Command, Overwrite
from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic builds JSON schemas from it on Python < 3.12 (Studio's forms)

from ..answer_forms import asks_yes_no, expected_form, has_form
from ..choices import YES_NO_GUESS, guess_option, inline_choices
from ..core.calibration import ConfidenceModel
from ..core.cancellation import current_cancel, raise_if_cancelled, run_abandonable
from ..core.configs import DEFAULT_EPISODES_KEPT, MAX_EPISODES_KEPT, Budget
from ..core.configs import MAX_COST, MAX_TURNS  # noqa: F401  (the bounds, importable from here too)
from ..core.question_text import clean_question, is_blank, question_problem
from ..errors import ConfigError, ExpertFailure, first_validation_problem
from ..images.sources import ImageRefused, ImageSources
from ..policy import DEFAULT_POLICY, ActionSpace, EpisodeView, Policy, PolicyCatalog, best_candidate
from ..registry import Registry
from ..registry.reach import REACH_FLOOR
from ..types import Answer, Decision, ErrorKind, InvalidAction, Invoke, Step, StopReason, Turn, stop_text
from .confidence import confidence_features, shipped_confidence
from .written_state import INPUT_FIELDS, appended, state_problem
from .conversation import conversation_images, history, human_parts, spoken

__all__ = [
    "IMAGE_NAMESPACE", "IMAGE_REF", "CONTEXT_KEY", "EpisodeRecord", "MaestroContext", "MaestroInput", "MaestroOutput", "MaestroState", "build_graph",
    "INTAKE", "ROUTER", "ANSWER", "final_answer", "checkpoint_serde", "CHECKPOINT_TYPES",
]

INTAKE = "intake"
ROUTER = "router"
ANSWER = "answer"


IMAGE_NAMESPACE = ("maestro", "images")
"""Where a graph with a store (`build_graph(store=...)`, the Agent Server's) keeps a thread's images, once per content
digest: the state then holds `IMAGE_REF` references, so no checkpoint repeats an image's bytes."""
IMAGE_REF = "maestro-image:"


CONTEXT_KEY = "maestro"
"""The namespace of Maestro's settings in a parent graph's run context (a key of a mapping or an attribute)."""


@dataclass
class MaestroContext(Budget):
    """Per-run settings (LangGraph runtime context): the budget (its fields first, `configs.Budget`) and which policy
    decides."""

    policy: str | None = None
    """A policy name overriding the graph's policy for this run (e.g. "fixed:rapidocr@@chart-qa")."""
    greedy: bool = True
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    episodes_kept: Annotated[int, Field(ge=1, le=MAX_EPISODES_KEPT)] = DEFAULT_EPISODES_KEPT
    """The most finished episodes a thread keeps in `episodes` (the latest; older ones are dropped when an episode
    ends), so that each checkpoint of a long thread stays bounded. The skills see at most `MAX_HISTORY_TURNS` of
    them."""
    reach_floor: Annotated[float, Field(ge=0, le=1)] = REACH_FLOOR
    """Before each call: when the registry's reach (`Registry.reach`: the similarity-weighted share of the 10 most
    similar calibration questions that one of the pairs not yet called answered, known only where those are close
    to the question) is below this, the episode ends without a further call, with what the answer node can give (the
    best candidate so far, else a marked guess for choice and yes/no questions). 0 turns it off; a registry without
    a reach, and a question unlike every calibration question, are never stopped."""
    min_confidence: Annotated[float, Field(ge=0, le=1)] = 0.0
    """An answer less sure than this (its `confidence`: the probability that it is right) is withheld: the episode
    ends without an answer, stopped for low confidence ("I could not find out"), so a parent graph or a calling
    agent can escalate instead of trusting a guess. 0: every answer is given."""

    @classmethod
    def of(cls, context: object) -> "MaestroContext":
        """Maestro's settings from whatever context the run has, so Maestro runs under any parent graph's own
        context schema: a MaestroContext as it is; else what the `maestro` namespace holds (a key of a mapping or
        an attribute: a MaestroContext or a mapping of its fields); else the fields Maestro knows, read from the
        context's keys or attributes. Missing fields take their defaults and other keys are ignored. Every field is
        validated, a MaestroContext's too: the Agent Server builds one from a client's JSON without checking it
        (`MaestroContext(**context)`), so a wrong type or a value out of bounds is a ConfigError naming the field and
        the value (the run then ends with an input error)."""
        if context is None:
            return cls()
        scoped = context.get(CONTEXT_KEY) if isinstance(context, Mapping) else getattr(context, CONTEXT_KEY, None)
        source = context if isinstance(context, cls) or scoped is None else scoped
        names = [f.name for f in fields(cls)]
        if isinstance(source, Mapping):
            found = {n: source[n] for n in names if n in source}
        else:
            found = {n: getattr(source, n) for n in names if hasattr(source, n)}
        try:
            return _CONTEXT.validate_python(found)
        except ValidationError as exc:
            raise ConfigError(first_validation_problem(exc)[1], field="context") from None


_CONTEXT = TypeAdapter(MaestroContext)


class MaestroInput(TypedDict, total=False):
    """What a run sends: either `question` (+ `images`, `choices`) or a chat `messages` list whose last human
    message holds the text and image parts (what LangGraph Studio's chat panel sends). On a thread, every run
    with input starts a new episode: a trailing human message is its question, else `question`. A question that
    sends no image is about the conversation's latest one (episode.conversation: an earlier turn's, else the
    thread's); choices belong to one question only. `history`: the conversation the question continues, when the
    client keeps it (an OpenAI chat's earlier messages, each user turn with its images); on a thread without it,
    the thread's finished episodes are the history."""

    question: str
    images: list[str]
    choices: list[str] | None
    history: list[Turn]
    messages: Annotated[list[AnyMessage], add_messages]


AnswerSource = Literal["policy", "candidate", "guess"]
"""Who gave an episode's answer: the policy (or the graph for it, once the budget was spent); the graph, choosing the
best-supported candidate in the question's form because the policy gave no answer (or, for a choice question, named
no option); or the graph's prior guess (`choices.guess_option`, `choices.YES_NO_GUESS`) because no expert answered
in the form the question asks for (see `final_answer`)."""


class EpisodeRecord(TypedDict):
    """One finished episode of a thread, as `episodes` keeps it."""

    question: str
    choices: list[str] | None
    answer: str | None
    answer_source: AnswerSource | None
    confidence: float | None
    stop_reason: str
    steps: list[dict]


class MaestroOutput(TypedDict, total=False):
    """The current (last) episode's answer, steps and stop reason, every finished episode of the thread in
    `episodes` (oldest first, the current one last), and the chat `messages` when the run came as chat."""

    answer: str | None
    answer_source: AnswerSource | None
    """Who gave the answer (`AnswerSource`); None when there is none."""
    confidence: float | None
    """The probability that the answer is right (the graph's `ConfidenceModel` over `confidence_basis`); for an
    answer withheld below the run's `min_confidence`, the withheld answer's; None when there was no answer."""
    confidence_basis: dict[str, float] | None
    """What `confidence` was computed from (`episode.confidence.confidence_features`), recorded so a model can be
    fitted on scored episodes without re-running them."""
    steps: Annotated[list[dict], appended]
    decisions: Annotated[list[dict], appended]
    """Every router decision of the current episode (types.Decision): the action and its log-probability."""
    stop: StopReason | None
    """Why the episode ended (typed; stored as the StopReason's string, so a checkpoint holds plain values only);
    `stop_detail` holds an input error's reason, `stop_reason` the text clients see (`policy`, `budget`,
    `input error: <reason>`...)."""
    stop_detail: str | None
    stop_reason: str | None
    episodes: Annotated[list[EpisodeRecord], operator.add]
    messages: Annotated[list[AnyMessage], add_messages]


class MaestroState(MaestroInput, MaestroOutput, total=False):
    pending: dict | None
    thread_images: list[str]
    """The images the thread's latest question with images was about: a later question that sends none is about
    them (episode.conversation). Written by intake only, so a run's input (`images: []`) cannot erase them."""


def _steps(state: dict) -> list[Step]:
    return [Step.model_validate(s) for s in state.get("steps", [])]


def _view(state: dict, context: MaestroContext, images: list[str]) -> EpisodeView:
    choices = state.get("choices")
    return EpisodeView(
        question=state.get("question", "") or "",
        images=tuple(images),
        choices=tuple(choices) if choices else None,
        steps=tuple(_steps(state)),
        max_turns=context.max_turns,
        max_cost=context.max_cost,
    )


def build_graph(
    registry: Registry,
    policy: Policy | None = None,
    *,
    policies: PolicyCatalog | None = None,
    image_sources: ImageSources | None = None,
    checkpointer: Checkpointer = None,
    confidence: ConfidenceModel | None = None,
    store: BaseStore | None = None,
    name: str = "maestro",
) -> CompiledStateGraph:
    """Compile the Maestro graph. `policy` is the default (else the catalog's default, else `DEFAULT_POLICY`, the
    shipped checkpoint); a run's context may name another from `policies` (default: an open catalog, for the
    operator's own code). A graph served to clients passes a restricted catalog and `image_sources`: then every node
    that reads the images (intake, the router, each skill node) resolves them under that policy (verified data URLs)
    whatever wrote them, since a client's `Command` can write the state and jump past intake; a refusal ends the run
    with an input error that reads the same for a missing file and a forbidden one. The run context is read with
    `MaestroContext.of`, so the graph also runs as a subgraph under any parent's context. `confidence` turns an
    answer's evidence into the probability that it is right (default: the package's, `shipped_confidence`). With a
    `store` (or the one the Agent Server gives every run), a thread's data-URL images are kept there once per content
    digest (`IMAGE_NAMESPACE`) and its checkpoints hold references."""
    policies = policies or PolicyCatalog.open(DEFAULT_POLICY)
    default_policy = policy or policies.get()
    calibrated = confidence or shipped_confidence()
    skill_nodes = [s.name for s in registry.tier1]
    clash = {INTAKE, ROUTER, ANSWER} & set(skill_nodes)
    if clash:
        raise ConfigError(f"skill names {sorted(clash)} are reserved for graph nodes; rename the skill folder")

    def images_of(state: MaestroState, runtime: Runtime[MaestroContext]) -> list[str]:
        """The state's images as a node may read them: stored ones fetched, and under an image-source policy
        resolved again (ImageRefused when one is refused; cheap for images that were verified before)."""
        images = _fetched(runtime.store, list(state.get("images") or []))
        return image_sources.resolve(images) if image_sources is not None and images else images

    def intake(state: MaestroState, runtime: Runtime[MaestroContext]) -> Command[Literal["router", "answer"]]:
        """Start an episode. Every run with input comes here (LangGraph drops an interrupted run's pending work
        when new input arrives), so the question is this run's: a trailing human message (chat), else
        `question`; the previous episode's steps, answer and stop reason are cleared (it stays in `episodes`).
        Control characters leave the question; under an image-source policy every image becomes a verified data
        URL or the run ends with the refusal. The input checks every door relies on are made here, before any
        expert runs: the run context (`MaestroContext.of`) and the question (`question_problem`: too long, or blank
        without an image); a failed one ends the run with an input error. A blank question with an image is read
        from the image (`Registry.read_text`, the episode's first step) and routed on what was read; nothing read
        is the input error."""
        messages = state.get("messages") or []
        chat = bool(messages) and isinstance(messages[-1], HumanMessage)
        if chat:
            question, sent = human_parts(messages[-1])
        else:
            question, sent = state.get("question") or "", list(state.get("images") or [])
        question = clean_question(question) if isinstance(question, str) else ""
        update: dict = {"question": question, "steps": Overwrite([]), "decisions": Overwrite([]),
                        "answer": None, "answer_source": None, "confidence": None, "confidence_basis": None,
                        "stop": None, "stop_reason": None, "pending": None, "history": []}
        written = state_problem(state, INPUT_FIELDS)  # a client's own `history`, or what a Command wrote
        if written:
            return Command(goto=ANSWER, update={**update, **_stop(StopReason.INPUT_ERROR, written)})
        try:
            turns = history(state)
        except ValidationError as exc:
            problem = "; ".join(f"history.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            return Command(goto=ANSWER, update={**update, **_stop(StopReason.INPUT_ERROR, problem)})
        update["history"] = spoken(turns)
        images = conversation_images(sent, turns, messages[:-1] if chat else [], state.get("thread_images") or [])
        try:
            MaestroContext.of(runtime.context)
        except ConfigError as exc:
            return Command(goto=ANSWER, update={**update, **_stop(StopReason.INPUT_ERROR, exc)})
        problem = question_problem(question, image=bool(images))
        if problem:
            return Command(goto=ANSWER, update={**update, **_stop(StopReason.INPUT_ERROR, problem)})
        try:
            images = _fetched(runtime.store, images)
            if image_sources is not None and images:
                images = image_sources.resolve(images)
        except ImageRefused as exc:
            return Command(goto=ANSWER, update={**update, "images": [], **_stop(StopReason.INPUT_ERROR, exc)})
        update["images"] = _stored(runtime.store, images)
        if images:
            update["thread_images"] = update["images"]
        if is_blank(question):  # the whole question is in the picture: read it, then route on it
            step = registry.read_text(images)
            runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
            question = "" if step.error else clean_question(step.evidence).strip()
            update.update(question=question, steps=Overwrite([step.model_dump(mode="json")]))
            problem = question_problem(question)
            if problem:
                why = f"{problem}; and no question could be read from the image ({step.error or 'no text found'})"
                return Command(goto=ANSWER, update={**update, **_stop(StopReason.INPUT_ERROR, why)})
        if not state.get("choices"):  # options written in the question are its choices
            update["choices"] = inline_choices(question)
        return Command(goto=ROUTER, update=update)

    def router(state: MaestroState, runtime: Runtime[MaestroContext]) -> Command[Literal["answer"]]:
        raise_if_cancelled(current_cancel())  # the caller is gone: no further decision, nothing committed
        written = state_problem(state)  # a Command may have written any field and jumped here
        if written:
            return Command(goto=ANSWER, update={"answer": None, **_stop(StopReason.INPUT_ERROR, written)})
        try:
            context = MaestroContext.of(runtime.context)
        except ConfigError as exc:
            return Command(goto=ANSWER, update={"answer": None, **_stop(StopReason.INPUT_ERROR, exc)})
        try:
            images = images_of(state, runtime)
        except ImageRefused as exc:
            return Command(goto=ANSWER, update={"answer": None, **_stop(StopReason.INPUT_ERROR, exc)})
        view = _view(state, context, images)
        write = runtime.stream_writer
        problem = question_problem(view.question)  # checked at intake; again for a run that resumed past it
        if problem:
            return Command(goto=ANSWER, update={"answer": None, **_stop(StopReason.INPUT_ERROR, problem)})
        try:
            policy = default_policy if context.policy is None else policies.get(context.policy)
        except ConfigError as exc:  # a policy the catalog refuses or cannot build: the run's input was wrong
            return Command(goto=ANSWER, update={"answer": None, **_stop(StopReason.INPUT_ERROR, exc)})
        space = ActionSpace.build(registry, view)
        stop = _out_of_reach(registry, view, space, context.reach_floor)
        if stop is not None:  # nothing left fits: no further call, the answer node answers
            decision = Decision.of(Answer(None), turn=view.turn, policy=policy.name, log_prob=None, entropy=None,
                                   forced=True)
            write({"event": "decision", "turn": view.turn, "policy": policy.name, "action": _describe(Answer(None)),
                   "reach": stop["reach"]})
            return Command(goto=ANSWER, update={"answer": None, **stop["ending"], "decisions": [decision.model_dump()]})
        if not space.pairs and len(space.answers) == 1:  # nothing left to decide: the graph answers
            only = space.answers[0]
            decision = Decision.of(only, turn=view.turn, policy=policy.name, log_prob=0.0, entropy=0.0, forced=True)
            ending = _ending(view, only.text)
            if not view.images and not view.steps and not view.budget_spent:  # only an image would have helped
                ending = _stop(StopReason.INPUT_ERROR, _no_image(space))
            elif space.declined and ending["stop"] == StopReason.POLICY:  # every pair left is one its skill declines
                ending = _stop(StopReason.OUT_OF_REACH, "; ".join(f"{skill}: {why}" for skill, why in space.declined))
            return Command(goto=ANSWER, update={"answer": only.text, **ending, "decisions": [decision.model_dump()]})
        cancel = current_cancel()  # a router LM's blocking call is abandoned when the episode is cancelled
        started = time.perf_counter()
        dist = policy.distribution(view, space) if cancel is None else run_abandonable(
            policy.distribution, view, space, cancel=cancel)
        decided_s = time.perf_counter() - started
        if context.greedy and not policy.stochastic:
            action = dist.greedy()
        else:
            rng = np.random.default_rng([context.seed or 0, view.turn, len(view.question)])
            action = dist.sample(rng)
        event = {"event": "decision", "turn": view.turn, "policy": policy.name, "latency_s": round(decided_s, 6)}
        if view.budget_spent and not isinstance(action, Answer):  # a policy that ignored the spent budget
            event["overruled"] = _describe(action)  # the answer below is the graph's, not a draw of the policy's
            action = Answer(best_candidate(view.steps))
        log_prob = None if "overruled" in event else dist.log_prob(action)
        write({**event, "action": _describe(action), "log_prob": log_prob})
        decided = [Decision.of(action, turn=view.turn, policy=policy.name, log_prob=log_prob,
                               entropy=dist.entropy(), latency_s=decided_s).model_dump()]
        if isinstance(action, Answer):
            return Command(goto=ANSWER, update={"answer": action.text, **_ending(view, action.text),
                                                "decisions": decided})
        if isinstance(action, InvalidAction):  # no action at all (e.g. malformed LM output): same treatment
            step = Step(model="", skill="", input=action.text, error=action.reason, error_kind=ErrorKind.POLICY)
            write({"event": "step", **step.model_dump(exclude={"calls"})})
            return Command(goto=ROUTER, update={"steps": [step.model_dump(mode="json")], "decisions": decided})
        reason = registry.invalid_reason(action) or _needs_an_image(registry, action, view)
        if reason:  # the policy's mistake becomes an observation and costs a turn
            step = Step(model=action.model, skill=action.skill, input=action.input, error=reason, error_kind=ErrorKind.POLICY)
            write({"event": "step", **step.model_dump(exclude={"calls"})})
            return Command(goto=ROUTER, update={"steps": [step.model_dump(mode="json")], "decisions": decided})
        return Command(goto=action.skill, update={"pending": {"model": action.model, "skill": action.skill,
                                                              "input": action.input}, "decisions": decided})

    def make_skill_node(skill: str):
        def run_skill(state: MaestroState, runtime: Runtime[MaestroContext]) -> dict:
            if state_problem(state):  # written by a Command that jumped here: the router ends the episode on it
                return {}
            pending = state.get("pending") or {}
            action = Invoke(pending.get("model", ""), skill, pending.get("input", ""))
            try:
                images = images_of(state, runtime)
            except ImageRefused as exc:  # the skill never runs on an image the policy refuses
                step = Step(model=action.model, skill=skill, input=action.input, error=str(exc),
                            error_kind=ErrorKind.INPUT)
            else:
                step = registry.run(action, question=state.get("question", "") or "", images=images,
                                    choices=state.get("choices"), history=state.get("history"))
            runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
            return {"steps": [step.model_dump(mode="json")], "pending": None}

        run_skill.__name__ = f"skill_{skill.replace('-', '_')}"
        return run_skill

    def answer(state: MaestroState, runtime: Runtime[MaestroContext]) -> dict:
        """End the episode: a typed `error` event first when its input was at fault (so a caller sees the reason,
        not just a missing answer), the answer event, and the episode appended to the thread's `episodes`."""
        written = state_problem(state)  # a Command may have written any field and jumped here
        update: dict = {}
        if written:  # what the state holds is not to be read: the episode ends on the input error, emptied
            state = {"question": state.get("question") if isinstance(state.get("question"), str) else "",
                     **_stop(StopReason.INPUT_ERROR, written)}
            update = {"steps": Overwrite([]), "decisions": Overwrite([]), "pending": None, "stop_detail": written}
        stop = StopReason(state.get("stop") or StopReason.POLICY)
        reason = state.get("stop_reason") or stop_text(stop)
        judged: dict = {"confidence": None, "confidence_basis": None}
        withheld: dict = {}
        if stop == StopReason.INPUT_ERROR:
            runtime.stream_writer({"event": "error", "kind": "input", "message": state.get("stop_detail") or ""})
            final, source = state.get("answer"), None  # the input must be fixed: a guess would hide that
        else:
            final, source = final_answer(state)
            judged = judge(state, runtime, final, source)
            floor = MaestroContext.of(runtime.context).min_confidence
            if final is not None and judged["confidence"] < floor:  # withheld: the caller escalates
                withheld = _stop(StopReason.LOW_CONFIDENCE, f"the answer's confidence {judged['confidence']:.2f} "
                                                            f"is below min_confidence {floor:g}")
                stop, reason, final, source = StopReason.LOW_CONFIDENCE, withheld["stop_reason"], None, None
        runtime.stream_writer({"event": "answer", "answer": final, "answer_source": source,
                               "confidence": judged["confidence"], "stop": stop.value, "stop_reason": reason})
        record = EpisodeRecord(question=state.get("question") or "", choices=state.get("choices"), answer=final,
                               answer_source=source, confidence=judged["confidence"], stop_reason=reason,
                               steps=list(state.get("steps") or []))
        kept = _kept_episodes(runtime.context)
        earlier = list(state.get("episodes") or [])
        update |= {"answer": final, "answer_source": source, **judged, **withheld, "stop": stop.value,
                   "stop_reason": reason,
                   "episodes": [record] if len(earlier) < kept else Overwrite([*earlier, record][-kept:]),
                   "choices": None, "history": []}  # both belong to this question only
        if state.get("messages"):
            said = final if final is not None else (
                f"I could not find out ({reason})" if stop == StopReason.LOW_CONFIDENCE else f"(no answer: {reason})")
            update["messages"] = [AIMessage(content=said)]
        return update

    def judge(state: MaestroState, runtime: Runtime[MaestroContext], final: str | None,
              source: AnswerSource | None) -> dict:
        """The answer's confidence and what it was computed from; nothing for no answer."""
        if final is None:
            return {"confidence": None, "confidence_basis": None}
        try:
            images = images_of(state, runtime)
        except ImageRefused:  # judged without them: their descriptors are then missing from the features
            images = []
        basis = confidence_features(registry, state.get("question") or "", images, state.get("choices"),
                                    _steps(dict(state)), final, source)
        return {"confidence": round(calibrated.probability(basis), 4), "confidence_basis": basis}

    builder = StateGraph(
        MaestroState, context_schema=MaestroContext, input_schema=MaestroInput, output_schema=MaestroOutput
    )
    builder.add_node(INTAKE, intake, destinations=(ROUTER, ANSWER))
    builder.add_node(ROUTER, router, destinations=(*skill_nodes, ANSWER, ROUTER))
    for skill in skill_nodes:
        builder.add_node(skill, make_skill_node(skill))
        builder.add_edge(skill, ROUTER)
    builder.add_node(ANSWER, answer)
    builder.add_edge(START, INTAKE)
    builder.add_edge(ANSWER, END)
    return builder.compile(checkpointer=checkpointer, store=store, name=name)




CHECKPOINT_TYPES: tuple[tuple[str, str], ...] = tuple(
    (t.__module__, t.__name__) for t in (StopReason, ErrorKind, ExpertFailure))
"""Maestro's own types that checkpoints written before the state held only plain values carry (`stop`, a step's
`error_kind`, a call's `failure`; now their strings, so that the Agent Server's checkpointer, which offers no
msgpack allow-list, reads a thread without warnings); LangGraph's message types are on its built-in allow-list."""


def checkpoint_serde() -> JsonPlusSerializer:
    """The serializer of Maestro's checkpointers (`maestro serve --checkpoint-db`, `maestro ask --checkpoint-db`):
    LangGraph's, with Maestro's older types registered on its msgpack allow-list. The default serializer loads any
    type and warns on stderr, once per type, that unregistered ones will be blocked in a future version; this one
    loads these and LangGraph's safe types, and hands back the raw value of anything else instead of importing it."""
    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES)


def final_answer(state: Mapping[str, Any]) -> tuple[str | None, AnswerSource | None]:
    """The answer an episode ends with (`state`: question, choices, steps and the policy's answer), for every policy
    and for the trainers that value an ending without running it. The policy's answer, unless it gave none or the
    question fixes the form and the answer is not in it (options, or an explicit "answer yes or no"): then the
    best-supported candidate in the form the question asks for (an option, yes/no, a short number, any text), marked
    `candidate`; then, with nothing of that form, a marked `guess` where one has a prior (among a choice question's
    options, `YES_NO_GUESS` for a yes/no question). A form read only from the wording does not overrule the policy
    ("Is it odd or even?" opens like a yes/no question). A question nothing answered in its form, with no prior,
    stays without an answer."""
    final = state.get("answer")
    choices = state.get("choices") or None
    steps = _steps(dict(state))
    question = state.get("question") or ""
    form = expected_form(question, choices)
    fixed = form == "choice" or (form == "yesno" and asks_yes_no(question))
    if final is not None and (not fixed or has_form(final, form, choices)):
        return final, "policy"
    said = best_candidate([s for s in steps if has_form(s.answer, form, choices)])
    if said is not None:
        return said, "candidate"
    if form == "choice":
        evidence = [t for s in steps if not s.error for t in (s.answer, s.evidence) if t]
        return guess_option(choices, evidence, question), "guess"
    if form == "yesno":
        return YES_NO_GUESS, "guess"
    return None, None


def _stop(stop: StopReason, detail: object = None) -> dict:
    """The state update that ends an episode for `stop`: the typed kind, its detail, and the text clients see."""
    text = str(detail) if detail is not None else None
    return {"stop": stop.value, "stop_detail": text, "stop_reason": stop_text(stop, text)}


def _out_of_reach(registry: Registry, view: EpisodeView, space: ActionSpace, floor: float) -> dict | None:
    """The ending when the registry's reach says none of the pairs not yet called is likely to answer: before the
    first call, where similar calibration questions were rarely answered by any pair; after calls, where they were
    rarely answered by a pair not yet tried (those that answer such questions have been called). Neighbours that
    only the pairs of a skill declining this question answered do not count (Reach.estimate). None: go on (no
    floor, no reach, no pair left to call, or a question unlike the calibration items)."""
    left = [p.id for p in space.pairs if not view.called(p.id)]
    if floor <= 0 or registry.reach is None or not left:
        return None
    declined = {skill for skill, _ in space.declined}
    reach = registry.reach.estimate(view.question, view.images, view.choices, left,
                                    declined=[p.id for p in space.registry_pairs if p.skill.name in declined])
    if reach is None or reach >= floor:
        return None
    ending = _ending(view, None) if view.steps else {}
    if ending.get("stop") != StopReason.INPUT_ERROR:
        asked = "similar questions" if not view.steps else "similar questions, by the pairs not yet called,"
        ending = _stop(StopReason.OUT_OF_REACH, f"{asked} reached {reach:.2f} < floor {floor:g}")
    return {"reach": round(reach, 3), "ending": ending}


def _needs_an_image(registry: Registry, action: Invoke, view: EpisodeView) -> str | None:
    """Why a pair the action space left out for want of an image is no action now (for a policy that named it
    anyway, such as an LM router), or None."""
    skill = registry.skills.get(action.skill)
    if view.images or skill is None or not skill.needs_image:
        return None
    return f"{action.pair} needs an image and the request has none; choose a pair whose skill reads text only"


def _stored(store: BaseStore | None, images: list[str]) -> list[str]:
    """The images as the state keeps them: with a store, each data URL put there once under its content digest and
    replaced by its `IMAGE_REF` reference (file paths and URLs are short: kept as they are)."""
    if store is None:
        return images
    refs = []
    for image in images:
        if image.startswith("data:"):
            key = hashlib.sha256(image.encode()).hexdigest()
            if store.get(IMAGE_NAMESPACE, key) is None:
                store.put(IMAGE_NAMESPACE, key, {"url": image})
            image = IMAGE_REF + key
        refs.append(image)
    return refs


def _fetched(store: BaseStore | None, images: list[str]) -> list[str]:
    """The images with every `IMAGE_REF` reference replaced by the stored image; one no longer stored (the store's
    retention removed it) is the request's ImageRefused: the image must be sent again."""
    out = []
    for i, image in enumerate(images):
        if image.startswith(IMAGE_REF):
            item = store.get(IMAGE_NAMESPACE, image.removeprefix(IMAGE_REF)) if store is not None else None
            if item is None:
                raise ImageRefused(400, "image_expired", f"image {i} of the conversation is no longer stored (its "
                                   "retention ran out); send it again", param=f"images.{i}")
            image = item.value["url"]
        out.append(image)
    return out


def _kept_episodes(context: object) -> int:
    """The run's `episodes_kept` (its default when the context is unusable: the run has already ended on it)."""
    try:
        return MaestroContext.of(context).episodes_kept
    except ConfigError:
        return DEFAULT_EPISODES_KEPT


def _no_image(space: ActionSpace) -> str:
    """Why a question without an image in its request or conversation cannot be answered (an input error)."""
    if space.needs_image:
        return (f"no image: this is a question for {', '.join(space.needs_image)}, which read(s) an image, and "
                "neither the request nor its conversation has one; send the image it is about")
    return ("no image: no skill here answers this question from its text alone, and neither the request nor its "
            "conversation has an image; send the image it is about")


def _ending(view: EpisodeView, answer: str | None) -> dict:
    """Why an episode ends with `answer`: a no-answer after every step that ran a skill failed on its input (a
    missing or unreadable image) is the input's fault and says so; else the budget, or the policy's choice."""
    ran = [s for s in view.steps if s.error_kind != ErrorKind.POLICY]
    if answer is None and ran and all(s.error_kind == ErrorKind.INPUT for s in ran):
        return _stop(StopReason.INPUT_ERROR, ran[0].error)
    return _stop(StopReason.BUDGET if view.budget_spent else StopReason.POLICY)


def _describe(action: Invoke | Answer | InvalidAction) -> dict:
    if isinstance(action, Answer):
        return {"type": "answer", "text": action.text}
    if isinstance(action, InvalidAction):
        return {"type": "invalid", "text": action.text, "reason": action.reason}
    return {"type": "invoke", "pair": action.pair, "input": action.input}
