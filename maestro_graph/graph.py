"""The decision process as a LangGraph StateGraph: router (the policy) -> one node per tier-1 skill -> router ...
-> answer -> END. One factory builds it from a registry and a policy; the same graph serves the CLI, evaluation,
rollouts, HTTP and LangGraph Studio."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

import numpy as np
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.types import Checkpointer, Command

from .cancellation import current_cancel, raise_if_cancelled, run_abandonable
from .errors import ConfigError
from .image_sources import ImageRefused, ImageSources
from .policy import DEFAULT_POLICY, ActionSpace, EpisodeView, Policy, PolicyCatalog, best_candidate
from .questions import clean_question, question_problem
from .registry import Registry
from .types import Answer, InvalidAction, Invoke, Step

__all__ = ["MaestroContext", "MaestroInput", "MaestroOutput", "MaestroState", "build_graph", "INTAKE", "ROUTER", "ANSWER"]

INTAKE = "intake"
ROUTER = "router"
ANSWER = "answer"


@dataclass
class MaestroContext:
    """Per-run settings (LangGraph runtime context): the budget and which policy decides."""

    max_turns: int = 4
    max_cost: float = 10.0
    policy: str | None = None
    """A policy name overriding the graph's policy for this run (e.g. "fixed:rapidocr@@chart-qa")."""
    greedy: bool = True
    seed: int | None = None


class MaestroInput(TypedDict, total=False):
    """Either `question` (+ `images`, `choices`) or a chat `messages` list whose last human message holds the text
    and image parts (what LangGraph Studio's chat panel sends)."""

    question: str
    images: list[str]
    choices: list[str] | None
    messages: Annotated[list[AnyMessage], add_messages]


class MaestroOutput(TypedDict, total=False):
    answer: str | None
    steps: Annotated[list[dict], operator.add]
    stop_reason: str
    messages: Annotated[list[AnyMessage], add_messages]


class MaestroState(MaestroInput, MaestroOutput, total=False):
    pending: dict | None


def _from_messages(messages: list[AnyMessage]) -> tuple[str, list[str]]:
    """Question text and image references from the last human message (OpenAI/LangChain content parts)."""
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if human is None:
        return "", []
    if isinstance(human.content, str):
        return human.content, []
    texts, images = [], []
    for part in human.content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(part.get("text", ""))
        elif part.get("type") == "image_url":
            url = part.get("image_url")
            images.append(url.get("url", "") if isinstance(url, dict) else str(url))
        elif part.get("type") == "image" and part.get("base64"):
            images.append(f"data:{part.get('mime_type', 'image/png')};base64,{part['base64']}")
    return "\n".join(t for t in texts if t), images


def _steps(state: dict) -> list[Step]:
    return [Step.model_validate(s) for s in state.get("steps", [])]


def _view(state: dict, context: MaestroContext) -> EpisodeView:
    choices = state.get("choices")
    return EpisodeView(
        question=state.get("question", "") or "",
        images=tuple(state.get("images") or ()),
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
    name: str = "maestro",
) -> Any:
    """Compile the Maestro graph. `policy` is the default (else the catalog's default, else the rules baseline); a
    run's context may name another from `policies` (default: an open catalog, for the operator's own code). A graph
    served to clients passes a restricted catalog and `image_sources`: then the images of every run are resolved
    under that policy (verified data URLs) before any skill sees them."""
    policies = policies or PolicyCatalog.open(DEFAULT_POLICY)
    default_policy = policy or policies.get()
    skill_nodes = [s.name for s in registry.tier1]
    clash = {INTAKE, ROUTER, ANSWER} & set(skill_nodes)
    if clash:
        raise ConfigError(f"skill names {sorted(clash)} are reserved for graph nodes; rename the skill folder")

    def intake(state: MaestroState) -> Command[Literal["router", "answer"]]:
        """A chat request (`messages`) becomes a question with images; control characters leave the question;
        under an image-source policy every image becomes a verified data URL or the run ends with the refusal."""
        if state.get("question") or not state.get("messages"):
            question = state.get("question") or ""
            update: dict = {"question": clean_question(question)}
            images = list(state.get("images") or [])
        else:
            question, found = _from_messages(state["messages"])
            update = {"question": clean_question(question)}
            images = [*(state.get("images") or []), *found]
        if image_sources is not None and images:
            try:
                images = image_sources.resolve(images)
            except ImageRefused as exc:
                return Command(goto=ANSWER, update={**update, "images": [], "answer": None,
                                                    "stop_reason": f"input error: {exc}"})
        if images != list(state.get("images") or []):
            update["images"] = images
        return Command(goto=ROUTER, update=update)

    def router(state: MaestroState, runtime: Runtime[MaestroContext]) -> Command[Literal["answer"]]:
        context = runtime.context or MaestroContext()
        view = _view(state, context)
        write = runtime.stream_writer
        raise_if_cancelled(current_cancel())  # the caller is gone: no further decision, nothing committed
        if not view.question.strip() and not view.images:
            return Command(goto=ANSWER, update={"answer": None, "stop_reason": "input error: empty question and no image"})
        problem = question_problem(view.question)
        if problem:
            return Command(goto=ANSWER, update={"answer": None, "stop_reason": f"input error: {problem}"})
        try:
            policy = default_policy if context.policy is None else policies.get(context.policy)
        except ConfigError as exc:  # a policy the catalog refuses or cannot build: the run's input was wrong
            return Command(goto=ANSWER, update={"answer": None, "stop_reason": f"input error: {exc}"})
        space = ActionSpace.build(registry, view)
        if view.budget_spent and len(space.answers) == 1:  # nothing left to decide
            return Command(goto=ANSWER, update={"answer": space.answers[0].text, "stop_reason": "budget"})
        cancel = current_cancel()  # a router LM's blocking call is abandoned when the episode is cancelled
        dist = policy.distribution(view, space) if cancel is None else run_abandonable(
            policy.distribution, view, space, cancel=cancel)
        if context.greedy and not getattr(policy, "stochastic", False):
            action = dist.greedy()
        else:
            rng = np.random.default_rng([context.seed or 0, view.turn, len(view.question)])
            action = dist.sample(rng)
        event = {"event": "decision", "turn": view.turn, "policy": policy.name}
        if view.budget_spent and not isinstance(action, Answer):  # a policy that ignored the spent budget
            event["overruled"] = _describe(action)  # the answer below is the graph's, not a draw of the policy's
            action = Answer(best_candidate(view.steps))
        write({**event, "action": _describe(action),
               "log_prob": None if "overruled" in event else dist.log_prob(action)})
        if isinstance(action, Answer):
            reason = "budget" if view.budget_spent else "policy"
            return Command(goto=ANSWER, update={"answer": action.text, "stop_reason": reason})
        if isinstance(action, InvalidAction):  # no action at all (e.g. malformed LM output): same treatment
            step = Step(model="", skill="", input=action.text, error=action.reason, error_kind="policy")
            write({"event": "step", **step.model_dump(exclude={"calls"})})
            return Command(goto=ROUTER, update={"steps": [step.model_dump()]})
        reason = registry.invalid_reason(action)
        if reason:  # the policy's mistake becomes an observation and costs a turn
            step = Step(model=action.model, skill=action.skill, input=action.input, error=reason, error_kind="policy")
            write({"event": "step", **step.model_dump(exclude={"calls"})})
            return Command(goto=ROUTER, update={"steps": [step.model_dump()]})
        return Command(goto=action.skill, update={"pending": {"model": action.model, "skill": action.skill,
                                                              "input": action.input}})

    def make_skill_node(skill: str):
        def run_skill(state: MaestroState, runtime: Runtime[MaestroContext]) -> dict:
            pending = state.get("pending") or {}
            action = Invoke(pending.get("model", ""), skill, pending.get("input", ""))
            step = registry.run(
                action, question=state.get("question", "") or "", images=state.get("images") or [],
                choices=state.get("choices"),
            )
            runtime.stream_writer({"event": "step", **step.model_dump(exclude={"calls"})})
            return {"steps": [step.model_dump()], "pending": None}

        run_skill.__name__ = f"skill_{skill.replace('-', '_')}"
        return run_skill

    def answer(state: MaestroState, runtime: Runtime[MaestroContext]) -> dict:
        final = state.get("answer")
        reason = state.get("stop_reason") or "policy"
        runtime.stream_writer({"event": "answer", "answer": final, "stop_reason": reason})
        update: dict = {"answer": final, "stop_reason": reason}
        if state.get("messages"):
            update["messages"] = [AIMessage(content=final if final is not None else "(no answer)")]
        return update

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
    return builder.compile(checkpointer=checkpointer, name=name)


def _describe(action: Invoke | Answer | InvalidAction) -> dict:
    if isinstance(action, Answer):
        return {"type": "answer", "text": action.text}
    if isinstance(action, InvalidAction):
        return {"type": "invalid", "text": action.text, "reason": action.reason}
    return {"type": "invoke", "pair": action.pair, "input": action.input}
