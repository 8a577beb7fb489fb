"""The router node: the policy's decision at each turn, and what the graph decides without asking it (nothing left
to call, the registry's reach below the floor, a spent budget). A call goes to its skill's node as a `SkillCall`
(`Send`); a policy's mistake becomes an observation that costs a turn; an answer goes to the answer node."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from langgraph.runtime import Runtime
from langgraph.types import Command, Send, StreamWriter

from ..core.cancellation import current_cancel, raise_if_cancelled, run_abandonable
from ..errors import ConfigError, InputError
from ..policy import ActionSpace, EpisodeView, Policy, best_candidate
from ..registry import Registry
from ..types import Answer, Decision, ErrorKind, InvalidAction, Invoke, Step, StopReason
from .context import MaestroContext
from .endings import ending, stop_update
from .image_refs import fetched
from .parts import GraphParts
from .state import ANSWER, ROUTER, DecisionRecord, MaestroState, SkillCall, decision_record, step_record
from .written_state import WrittenState, read_state

__all__ = ["router"]


@dataclass(frozen=True)
class _Turn:
    """What one decision is made from: the state as the policy sees it, the run's settings and its policy."""

    state: WrittenState
    view: EpisodeView
    context: MaestroContext
    policy: Policy


# Command[str]: the router goes to the answer node, back to itself, or to a skill's node, which are named at run time
# (the registry's skills), so its destinations are no Literal
def router(state: MaestroState, runtime: Runtime[MaestroContext], *, parts: GraphParts) -> Command[str]:
    """One decision: the episode's end when what the state holds cannot be used (an input error) or the graph decides
    it alone (`_forced`), else the policy's action (`_drawn`): a call sent to its skill's node, an observation of
    its mistake (back to the router), or the answer. Each decision is recorded (`types.Decision`) and streamed as a
    `decision` event. A call goes by `Send`, which `Command`'s type allows beside the named nodes; the skills'
    nodes are the registry's, so `build_graph` names them among the router's destinations."""
    raise_if_cancelled(current_cancel())  # the caller is gone: no further decision, nothing committed
    try:
        turn = _turn(read_state(state), runtime, parts)
    except (InputError, ConfigError) as exc:
        return Command(goto=ANSWER, update={"answer": None, **stop_update(StopReason.INPUT_ERROR, exc)})
    space = ActionSpace.build(parts.registry, turn.view)
    return _forced(turn, space, parts.registry, runtime.stream_writer) or _drawn(turn, space, parts, runtime)


def _turn(written: WrittenState, runtime: Runtime[MaestroContext], parts: GraphParts) -> _Turn:
    """The decision's inputs, in the order a caller's mistakes are reported (after what a Command wrote): the run
    context, the images (verified where they entered: `image_refs.fetched` only reads stored ones back, and an
    expired one is the input error), the policy the context names. The question was checked where it entered."""
    context = MaestroContext.of(runtime.context)
    images = fetched(runtime.store, written.get("images") or [])
    choices = written.get("choices")
    view = EpisodeView(question=written.get("question") or "", images=tuple(images),
                       choices=tuple(choices) if choices else None, steps=tuple(written.get("steps") or ()),
                       max_turns=context.max_turns, max_cost=context.max_cost)
    return _Turn(written, view, context, parts.policy_for(context))


def _forced(turn: _Turn, space: ActionSpace, registry: Registry,
            write: StreamWriter) -> Command[str] | None:
    """The ending the graph decides without asking the policy, or None: before the first call, the reach says no
    pair is likely to answer (`_out_of_reach`; after a call it only overrules a further call, in `_drawn`), or no
    pair is left and one answer is (budget spent, every pair called or declined, or only an image would have
    helped)."""
    view, name = turn.view, turn.policy.name
    stop = None if view.steps else _out_of_reach(registry, view, space, turn.context.reach_floor)
    if stop is not None:
        return _reach_stop(turn, stop, write)
    if space.pairs or len(space.answers) != 1:
        return None
    only = space.answers[0]  # nothing left to decide: the graph answers
    decision = Decision.of(only, turn=view.turn, policy=name, log_prob=0.0, entropy=0.0, forced=True)
    ended = ending(view, only.text)
    if not view.images and not view.steps and not view.budget_spent:  # only an image would have helped
        ended = stop_update(StopReason.INPUT_ERROR, _no_image(space))
    elif space.declined and ended["stop"] == StopReason.POLICY:  # every pair left is one its skill declines
        ended = stop_update(StopReason.OUT_OF_REACH, "; ".join(f"{skill}: {why}" for skill, why in space.declined))
    return Command(goto=ANSWER, update={"answer": only.text, **ended, "decisions": [decision_record(decision)]})


def _reach_stop(turn: _Turn, stop: dict, write: StreamWriter) -> Command[str]:
    """Nothing left fits: no further call, the answer node answers (a forced decision, no log-probability)."""
    view, name = turn.view, turn.policy.name
    decision = Decision.of(Answer(None), turn=view.turn, policy=name, log_prob=None, entropy=None, forced=True)
    write({"event": "decision", "turn": view.turn, "policy": name, "action": _describe(Answer(None)),
           "reach": stop["reach"]})
    return Command(goto=ANSWER, update={"answer": None, **stop["ending"], "decisions": [decision_record(decision)]})


def _drawn(turn: _Turn, space: ActionSpace, parts: GraphParts,
           runtime: Runtime[MaestroContext]) -> Command[str]:
    """The policy's action, drawn from its distribution (greedy unless the run samples or the policy is
    stochastic), and where it leads. A policy that still calls once the budget is spent is overruled: the graph
    answers the best candidate, and the decision carries no log-probability (the policy never drew it)."""
    view, write = turn.view, runtime.stream_writer
    cancel = current_cancel()  # a router LM's blocking call is abandoned when the episode is cancelled
    started = time.perf_counter()
    dist = turn.policy.distribution(view, space) if cancel is None else run_abandonable(
        turn.policy.distribution, view, space, cancel=cancel)
    decided_s = time.perf_counter() - started
    if turn.context.greedy and not turn.policy.stochastic:
        action = dist.greedy()
    else:
        action = dist.sample(np.random.default_rng([turn.context.seed or 0, view.turn, len(view.question)]))
    if isinstance(action, Invoke) and view.steps:  # the reach overrules a further call, never the policy's answer
        stop = _out_of_reach(parts.registry, view, space, turn.context.reach_floor)
        if stop is not None:
            return _reach_stop(turn, stop, write)
    event = {"event": "decision", "turn": view.turn, "policy": turn.policy.name, "latency_s": round(decided_s, 6)}
    if view.budget_spent and not isinstance(action, Answer):  # a policy that ignored the spent budget
        event["overruled"] = _describe(action)  # the answer below is the graph's, not a draw of the policy's
        action = Answer(best_candidate(view.steps))
    log_prob = None if "overruled" in event else dist.log_prob(action)
    write({**event, "action": _describe(action), "log_prob": log_prob})
    decided = [decision_record(Decision.of(action, turn=view.turn, policy=turn.policy.name, log_prob=log_prob,
                                           entropy=dist.entropy(), latency_s=decided_s))]
    if isinstance(action, Answer):
        return Command(goto=ANSWER, update={"answer": action.text, **ending(view, action.text), "decisions": decided})
    if isinstance(action, InvalidAction):  # no action at all (e.g. malformed LM output): same treatment
        return _observed(Step(model="", skill="", input=action.text, error=action.reason,
                              error_kind=ErrorKind.POLICY), decided, write)
    reason = parts.registry.invalid_reason(action) or _needs_an_image(parts.registry, action, view)
    if reason:  # the policy's mistake becomes an observation and costs a turn
        return _observed(Step(model=action.model, skill=action.skill, input=action.input, error=reason,
                              error_kind=ErrorKind.POLICY), decided, write)
    return Command(goto=Send(action.skill, _call(action, turn.state)), update={"decisions": decided})


def _call(action: Invoke, state: WrittenState) -> SkillCall:
    """The call as its skill node is sent it: the action's model and input and what the skill reads of the episode
    (the images as the state holds them: references when the graph has a store)."""
    return SkillCall(model=action.model, input=action.input, question=state.get("question") or "",
                     images=list(state.get("images") or []), choices=state.get("choices"),
                     history=list(state.get("history") or []))


def _observed(step: Step, decided: list[DecisionRecord], write: StreamWriter) -> Command[str]:
    """A policy's mistake as the step it costs, back to the router."""
    write({"event": "step", **step.model_dump(exclude={"calls"})})
    return Command(goto=ROUTER, update={"steps": [step_record(step)], "decisions": decided})


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
    ended = ending(view, None) if view.steps else {}
    if ended.get("stop") != StopReason.INPUT_ERROR:
        asked = "similar questions" if not view.steps else "similar questions, by the pairs not yet called,"
        ended = stop_update(StopReason.OUT_OF_REACH, f"{asked} reached {reach:.2f} < floor {floor:g}")
    return {"reach": round(reach, 3), "ending": ended}


def _needs_an_image(registry: Registry, action: Invoke, view: EpisodeView) -> str | None:
    """Why a pair the action space left out for want of an image is no action now (for a policy that named it
    anyway, such as an LM router), or None."""
    skill = registry.skills.get(action.skill)
    if view.images or skill is None or not skill.needs_image:
        return None
    return f"{action.pair} needs an image and the request has none; choose a pair whose skill reads text only"


def _no_image(space: ActionSpace) -> str:
    """Why a question without an image in its request or conversation cannot be answered (an input error)."""
    if space.needs_image:
        return (f"no image: this is a question for {', '.join(space.needs_image)}, which read(s) an image, and "
                "neither the request nor its conversation has one; send the image it is about")
    return ("no image: no skill here answers this question from its text alone, and neither the request nor its "
            "conversation has an image; send the image it is about")


def _describe(action: Invoke | Answer | InvalidAction) -> dict:
    if isinstance(action, Answer):
        return {"type": "answer", "text": action.text}
    if isinstance(action, InvalidAction):
        return {"type": "invalid", "text": action.text, "reason": action.reason}
    return {"type": "invoke", "pair": action.pair, "input": action.input}
