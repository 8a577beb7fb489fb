"""The Maestro graph's state schema: what a run sends (`MaestroInput`), what it returns (`MaestroOutput`), what its
nodes share (`MaestroState`), what the router hands a skill node (`SkillCall`), and the names of its nodes.

Every value the state holds is plain JSON (strings, numbers, lists, dicts; LangChain messages, which LangGraph's
serializer knows): a step and a decision are kept as the JSON form of `types.Step` and `types.Decision`
(`StepRecord`, `DecisionRecord`) and typed enums as their strings, so any checkpointer reads a thread back without
importing a Maestro type, the Agent Server's too (which offers no msgpack allow-list). Nodes read these fields
through `episode.written_state`, which validates them into the typed objects: a client's `Command` can write any
value into any field.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, cast

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.types import Overwrite
from typing_extensions import TypedDict  # pydantic builds JSON schemas from it on Python < 3.12 (Studio's forms)

from ..types import Decision, Step, StopReason, Turn

__all__ = [
    "ANSWER", "INTAKE", "ROUTER", "AnswerSource", "DecisionRecord", "EpisodeRecord", "FreshRun", "MaestroInput",
    "MaestroOutput", "MaestroState", "SkillCall", "StepRecord", "appended", "decision_record", "fresh_run",
    "step_record",
]

INTAKE: Final = "intake"
ROUTER: Final = "router"
ANSWER: Final = "answer"
"""The graph's own nodes; every tier-1 skill adds one more, named as the skill (a skill may not take these names)."""
_SHOWN = 80
"""The most characters of a refused write that the reducer's error quotes."""


AnswerSource = Literal["policy", "candidate", "guess"]
"""Who gave an episode's answer: the policy (or the graph for it, once the budget was spent); the graph, choosing the
best-supported candidate in the question's form because the policy gave no answer (or, for a choice question, named
no option); or the graph's prior guess (`choices.guess_option`, `choices.YES_NO_GUESS`) because no expert answered
in the form the question asks for (see `episode.answer.final_answer`)."""


class StepRecord(TypedDict):
    """A `types.Step` as the state keeps it (`step_record`): its JSON form, `error_kind` as the ErrorKind's
    string."""

    model: str
    skill: str
    input: str
    evidence: str
    answer: str | None
    confidence: float
    cost: float
    latency_s: float
    error: str | None
    error_kind: str | None
    calls: list[dict[str, Any]]
    cached: bool


class DecisionRecord(TypedDict):
    """A `types.Decision` as the state keeps it (`decision_record`): its JSON form."""

    turn: int
    policy: str
    kind: Literal["invoke", "answer", "invalid"]
    pair: str | None
    input: str
    text: str | None
    reason: str | None
    log_prob: float | None
    entropy: float | None
    forced: bool
    latency_s: float | None


def step_record(step: Step) -> StepRecord:
    return cast(StepRecord, step.model_dump(mode="json"))


def decision_record(decision: Decision) -> DecisionRecord:
    return cast(DecisionRecord, decision.model_dump(mode="json"))


def appended(old: list, new: list) -> list:
    """The reducer of the lists that grow by writes (`steps`, `decisions`, `episodes`): the write's items after the
    old ones. A write that is not a list is refused: a node that wrote one has a bug, and a client's run input or
    state update writing one is refused before the run by `run_input.check_update`, which names the field."""
    if not isinstance(new, list):
        shown = repr(new)
        raise TypeError(f"a write to a list field of the state must be a list, to append its items; got "
                        f"{type(new).__name__} {shown[:_SHOWN]}{'...' if len(shown) > _SHOWN else ''} "
                        f"(to append one item, write [item])")
    return [*old, *new]


class SkillCall(TypedDict):
    """One call of a skill with a model, as the router hands it to the skill's node (`Send(skill, SkillCall(...))`,
    the hand-off of LangGraph's prebuilt ToolNode): the model and input the policy chose, and what the skill reads of
    the episode (a node reached by `Send` sees its payload, not the state). `images` are the state's, verified where
    they entered (references to the store's images when the graph has a store, which the node reads back)."""

    model: str
    input: str
    question: str
    images: list[str]
    choices: list[str] | None
    history: list[Turn]


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


class EpisodeRecord(TypedDict):
    """One finished episode of a thread, as `episodes` keeps it."""

    question: str
    choices: list[str] | None
    answer: str | None
    answer_source: AnswerSource | None
    confidence: float | None
    stop_reason: str
    steps: list[StepRecord]


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
    steps: Annotated[list[StepRecord], appended]
    """Every step of the current episode (types.Step): the pair called, its outcome, cost and latency."""
    decisions: Annotated[list[DecisionRecord], appended]
    """Every router decision of the current episode (types.Decision): the action and its log-probability."""
    stop: StopReason | None
    """Why the episode ended (typed; stored as the StopReason's string, so a checkpoint holds plain values only);
    `stop_detail` holds an input error's reason, `stop_reason` the text clients see (`policy`, `budget`,
    `input error: <reason>`...)."""
    stop_detail: str | None
    stop_reason: str | None
    episodes: Annotated[list[EpisodeRecord], appended]
    reply: AnyMessage | None
    """The answer as an AI message (or why there is none: "I could not find out (...)"), whose `response_metadata`
    holds `answer_source`, `confidence`, `stop` and `stop_reason`: what LangGraph's `messages` stream mode sends for
    a `question` input as for a chat one. A chat run's reply is also the last of its `messages`."""
    messages: Annotated[list[AnyMessage], add_messages]


class MaestroState(MaestroInput, MaestroOutput, total=False):
    """What the nodes share: the input and output fields, and the thread's images."""

    asked: str
    """The question as the client asked it, before intake resolved it (a follow-up about an earlier answer, a
    question read from the image): what asking the thread's current question again is compared with
    (`runner.thread_mode`), so a retried follow-up replays instead of being resolved against its own answer."""
    confidence_cap: float | None
    """The most confidence this episode's answer may have: a follow-up computed from earlier answers is no surer than
    the least sure of them (episode.followups); None: no cap. Written by intake, cleared on every run."""
    thread_images: list[str]
    """The images the thread's latest question with images was about: a later question that sends none is about
    them (episode.conversation). Written by intake only, so a run's input (`images: []`) cannot erase them."""


class FreshRun(TypedDict):
    """What intake writes first on every run with input: the run's question, and the previous episode's outcome
    cleared, which a client reading the state's values mid-run would otherwise take for this run's until the answer
    node writes its own. The steps and decisions are replaced (`Overwrite`), since their reducer appends; the
    finished episodes stay (`episodes`, the thread's history)."""

    question: str
    asked: str
    steps: Overwrite
    decisions: Overwrite
    answer: None
    answer_source: None
    confidence: None
    confidence_basis: None
    confidence_cap: None
    reply: None
    stop: None
    stop_detail: None
    stop_reason: None
    history: list[Turn]


def fresh_run(question: str) -> FreshRun:
    """The start of a run asking `question` (intake then resolves it and writes what else it reads)."""
    return FreshRun(question=question, asked=question, steps=Overwrite([]), decisions=Overwrite([]), answer=None,
                    answer_source=None, confidence=None, confidence_basis=None, confidence_cap=None, reply=None,
                    stop=None, stop_detail=None, stop_reason=None, history=[])
