"""The node of a tier-1 skill: it runs the one call the router sent it (`SkillCall`) and records the step.

The router hands each call over as `Send(skill, SkillCall(...))`, as LangGraph's prebuilt ToolNode is handed a tool
call: the call (model, input) with what the skill reads of the episode, so the call lives in the task that runs it,
never in the state; a node reached by a `Command` without a call ends the episode with the input error."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from ..images.sources import ImageRefused
from ..types import ErrorKind, Invoke, Step
from .context import MaestroContext
from .endings import voided
from .image_refs import fetched
from .parts import GraphParts
from .state import ANSWER, ROUTER, SkillCall, step_record
from .written_state import BadState, read_call

__all__ = ["run_skill"]


def run_skill(call: SkillCall, runtime: Runtime[MaestroContext], *, skill: str,
              parts: GraphParts) -> Command[Literal["router", "answer"]]:
    """Run `skill` with the call's model on its input and the episode's question, images, choices and history, and
    hand the step (an expert's fault recorded in it) back to the router. `call` is the `SkillCall` the router sent;
    it is checked all the same, since a client's `Command` may send anything here, or jump here with no call at
    all (the node then gets the state): a malformed call goes to the answer node, which ends the episode with the
    typed input error (the only way a skill node reaches it). The call's images were verified where they entered
    (intake, or `episode.past_intake` for a client's `Send`); a stored one that has expired is the step's input
    error."""
    try:
        sent = read_call(call)
    except BadState as exc:
        return Command(goto=ANSWER, update=voided(exc))
    action = Invoke(sent["model"], skill, sent["input"])
    try:
        images = fetched(runtime.store, sent["images"])
    except ImageRefused as exc:
        step = Step(model=action.model, skill=skill, input=action.input, error=str(exc), error_kind=ErrorKind.INPUT)
    else:
        step = parts.registry.run(action, question=sent["question"], images=images, choices=sent["choices"],
                                  history=sent["history"])
    runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
    return Command(goto=ROUTER, update={"steps": [step_record(step)]})
