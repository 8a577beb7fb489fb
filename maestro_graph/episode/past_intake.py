"""What a client writes into an episode past intake, checked as intake checks what it reads.

A run's input enters through intake, which resolves its images under the graph's image-source policy and checks its
question; the router, the skill nodes and the answer node then trust what the state holds. A client of the Agent
Server may also send a `Command` that writes `images` or `question` and jumps to any node, or sends a node a payload
holding them (`Send`), or it may update a thread's state directly. `MaestroGraph` hands those writes here before
the run: their images are resolved (each becomes a verified data URL, kept in the store as intake keeps them) and
their question is checked (`question_problem`). A Command whose writes intake would refuse ends its run at the
answer node with the same input error, its images unwritten, so a reply reads the same whichever way an image came
in; a state update's is refused (InputError). A Command that goes to intake only is left as it is, for intake
checks what it reads. A value of the wrong type is left for the nodes to name (`episode.written_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from langgraph.store.base import BaseStore
from langgraph.types import Command, Send

from ..core.question_text import question_problem
from ..errors import InputError
from ..images.sources import ImageSources
from ..types import StopReason
from .endings import stop_update
from .image_refs import image_list, stored, verified
from .state import ANSWER, INTAKE

__all__ = ["checked_command", "checked_values", "targets"]


def targets(command: Command) -> list[Any]:
    """Where `command` goes: the nodes it names and the `Send`s it makes, as one list (LangGraph takes one or a
    list). Any: a client's `Command` may name anything, which the callers check."""
    goto = command.goto
    return list(goto) if isinstance(goto, (list, tuple)) else [goto] if goto else []


def checked_command(command: Command, sources: ImageSources | None, store: BaseStore | None) -> Command:
    """`command` with the images it writes or sends resolved, or, when intake would refuse one of them or its
    question, a Command that ends the run at the answer node on that input error."""
    gotos = targets(command)
    if gotos and all((g.node if isinstance(g, Send) else g) == INTAKE for g in gotos):
        return command
    update = None if command.update is None else dict(command.update)  # a mapping, or (channel, value) pairs
    try:
        sent = [Send(g.node, checked_values(g.arg, sources, store)) if isinstance(g, Send) else g for g in gotos]
        update = checked_values(update, sources, store)
    except InputError as exc:
        return Command(goto=ANSWER, update={**(update or {}), "answer": None, "images": [],
                                            **stop_update(StopReason.INPUT_ERROR, exc)})
    goto = sent if isinstance(command.goto, (list, tuple)) else sent[0] if sent else command.goto
    return replace(command, update=update, goto=goto)


def checked_values(values: Any, sources: ImageSources | None, store: BaseStore | None) -> Any:
    """`values` (a state update or a node's payload) with its `images` resolved under `sources` and stored, its
    `question` checked; an InputError (ImageRefused for an image) names the first problem. What is not a mapping, and
    a field of the wrong type, is returned as it is."""
    if not isinstance(values, Mapping):
        return values
    out = dict(values)
    images = out.get("images")
    if sources is not None and image_list(images) and images:
        out["images"] = stored(store, verified(store, images, sources))
    question = out.get("question")
    problem = question_problem(question) if isinstance(question, str) else None
    if problem:
        raise InputError(problem)
    return out
