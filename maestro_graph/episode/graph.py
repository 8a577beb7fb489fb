"""The decision process as a LangGraph StateGraph: intake -> router (the policy) -> one node per tier-1 skill ->
router ... -> answer -> END. One factory builds it from a registry and a policy; the same graph serves the CLI,
evaluation, rollouts, HTTP and LangGraph Studio. The state is `episode.state`, the run context `episode.context`,
and each node a module-level function of (state, runtime) given the graph's parts (`episode.parts.GraphParts`)."""

from __future__ import annotations

from functools import partial
from typing import cast

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from ..core.calibration import ConfidenceModel
from ..errors import ConfigError
from ..images.sources import ImageSources
from ..policy import DEFAULT_POLICY, Policy, PolicyCatalog
from ..registry import Registry
from .answer import answer
from .confidence import shipped_confidence
from .context import MaestroContext
from .intake import intake
from .parts import GraphParts
from .router import router
from .run_input import MaestroGraph
from .skill_node import run_skill
from .state import ANSWER, INTAKE, ROUTER, MaestroInput, MaestroOutput, MaestroState

__all__ = ["build_graph"]

_SKILL_DESTINATIONS = {ROUTER: "step", ANSWER: "malformed call"}
"""Where a skill node goes, labelled as drawn: its step back to the router, or, for a call that a client's `Command`
wrote wrong, the answer node, which ends the episode with the input error (`skill_node.run_skill`)."""


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
) -> MaestroGraph:
    """Compile the Maestro graph. `policy` is the default (else the catalog's default, else `DEFAULT_POLICY`, the
    shipped checkpoint); a run's context may name another from `policies` (default: an open catalog, for the
    operator's own code). A graph served to clients passes a restricted catalog and `image_sources`: then intake
    resolves a run's images under that policy (verified data URLs) and the compiled graph those that a client's
    `Command` or state update writes past intake (`episode.past_intake`), so the nodes after intake trust the state;
    a refusal ends the run with an input error that reads the same for a missing file and a forbidden one. The run
    context is read with `MaestroContext.of`, so the graph also runs as a subgraph under any parent's context.
    `confidence` turns an answer's evidence into the probability that it is right (default: the package's,
    `shipped_confidence`). With a `store` (or the one the Agent Server gives every run), a thread's data-URL images
    are kept there once per content digest (`episode.image_refs`) and its checkpoints hold references. The compiled
    graph is a `MaestroGraph`: a run's input or `Command` naming what the graph does not have is refused before it
    starts (`episode.run_input`)."""
    policies = policies or PolicyCatalog.open(DEFAULT_POLICY)
    parts = GraphParts(registry=registry, policy=policy or policies.get(), policies=policies,
                       confidence=confidence or shipped_confidence(), image_sources=image_sources)
    skills = [s.name for s in registry.tier1]
    clash = {INTAKE, ROUTER, ANSWER} & set(skills)
    if clash:
        raise ConfigError(f"skill names {sorted(clash)} are reserved for graph nodes; rename the skill folder")
    builder = StateGraph(
        MaestroState, context_schema=MaestroContext, input_schema=MaestroInput, output_schema=MaestroOutput
    )
    builder.add_node(INTAKE, partial(intake, parts=parts), destinations=(ROUTER, ANSWER))
    # named, not read from the nodes' annotations: a partial has none LangGraph reads, and the router's calls go to
    # the registry's skills by Send
    builder.add_node(ROUTER, partial(router, parts=parts), destinations=(*skills, ANSWER, ROUTER))
    for skill in skills:
        builder.add_node(skill, partial(run_skill, skill=skill, parts=parts), destinations=_SKILL_DESTINATIONS)
    builder.add_node(ANSWER, partial(answer, parts=parts))
    builder.add_edge(START, INTAKE)
    builder.add_edge(ANSWER, END)
    graph = builder.compile(checkpointer=checkpointer, store=store, name=name)
    graph.__class__ = MaestroGraph  # LangGraph's compiled graph, each run's input checked first (run_input.py)
    maestro = cast(MaestroGraph, graph)  # what the line above made it
    maestro.image_sources = image_sources
    return maestro
