"""What a run may hand the compiled graph, checked before LangGraph maps it into the state.

A client of the Agent Server sends a run's input, or a `Command`, as JSON, and LangGraph maps it into channels
without asking the graph: a key that is no input field or channel is dropped with a log line, a `goto` to a node the
graph lacks and a `resume` when nothing waits for one are ignored, so the run does nothing and returns the previous
run's answer as if it were this one's; `messages` that are not messages make LangGraph's own reducer raise
`NotImplementedError` before any node runs, and a write that is not a list makes the reducer of `steps`,
`decisions` and `episodes` (`state.appended`) raise. `MaestroGraph` refuses these with `BadRunInput`, naming the
field and the value, before the run starts (the SDK reports the run's error as `BadRunInput: <why>`); so does a
state update (`update_state`, the SDK's `threads.update_state`). With a store, it also puts a run's input images
there before the run (`image_refs.stored_input`), so the run's input checkpoint holds references, not the bytes.
What a Command or a state update writes past intake (images, a question) is checked as intake would check it
(`episode.past_intake`), so the nodes after intake trust the state. Any other value of the wrong type in a field
the graph has is the nodes' to name (`episode.written_state`): the run ends with the typed input error, as for any
other bad input.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, cast

from langchain_core.messages import convert_to_messages
from langchain_core.runnables import ensure_config
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Overwrite, Send, StateUpdate

from ..errors import InputError
from ..images.sources import ImageSources
from .image_refs import stored_input
from .past_intake import checked_command, checked_values, targets
from .state import MaestroOutput, MaestroState, appended

__all__ = ["BadRunInput", "MaestroGraph"]

_SHOWN = 80
"""The most characters of a wrong value that a refusal quotes."""
_MESSAGES = "messages"
_CHECKPOINT_NS = "checkpoint_ns"
"""The run config's key where LangGraph names the parent task of a nested run (its own constant is private)."""
_OVERWRITE = "__overwrite__"
"""How a JSON write marks LangGraph's `Overwrite` of a reduced field (its own constant is private)."""


class BadRunInput(InputError, ValueError):
    """A run's input or `Command`, or a state update, names what the graph does not have (a field, a channel, a
    node, a pending interrupt) or holds chat messages that are not messages; the message says which and what the
    graph has. A ValueError too: the Agent Server passes a ValueError's message on to the client, and replaces any
    other exception's by "An internal error occurred"."""


# its context and input are Any: a run's context may be a MaestroContext, a mapping of its fields or a parent graph's
# own (`MaestroContext.of` reads each), and its input is whatever a client sends, checked here (`check_run_input`)
class MaestroGraph(CompiledStateGraph[MaestroState, Any, Any, MaestroOutput]):
    """The compiled Maestro graph: LangGraph's, with every run's input and every state update checked first
    (`check_run_input`, `check_update`), and what a Command or an update writes past intake checked under the
    graph's `image_sources` (`episode.past_intake`). `stream` and `astream` are where every way of running it
    passes (`invoke`, the Agent Server's runs, `astream_events`); `bulk_update_state` and `abulk_update_state`
    where every state update does."""

    image_sources: ImageSources | None = None
    """The image-source policy intake resolves a run's images under (`build_graph(image_sources=...)`)."""

    def __init__(self, *, image_sources: ImageSources | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # LangGraph's `copy` (the Agent Server's, `with_config`) passes every attribute
        self.image_sources = image_sources

    def stream(self, input: Any, config: Any = None, **kwargs: Any):  # noqa: A002 - LangGraph's parameter name
        return super().stream(self._taken(input, _nested(config)), config, **kwargs)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any):  # noqa: A002 - LangGraph's name
        # the store's sync calls and the images' decoding, off the event loop (as a sync node makes them)
        taken = await asyncio.to_thread(self._taken, input, _nested(config))
        # LangGraph's astream is an async generator function, typed as returning an AsyncIterator
        streamed = cast(AsyncGenerator[Any, None], super().astream(taken, config, **kwargs))
        async with aclosing(streamed) as chunks:
            async for chunk in chunks:
                yield chunk

    def _taken(self, run_input: Any, nested: bool) -> Any:
        """The run's input as the graph takes it: checked (`check_run_input`); a Command's writes past intake
        checked (`past_intake.checked_command`); a top-level input's images put in the store (`_keeps_images`)."""
        check_run_input(self, run_input, nested=nested)
        if isinstance(run_input, Command):
            return checked_command(run_input, self.image_sources, self.store)
        if self._keeps_images(run_input, nested):
            return stored_input(self.store, dict(run_input))
        return run_input

    def _keeps_images(self, run_input: Any, nested: bool) -> bool:
        """Whether a run's input images go into the graph's store before the run (`image_refs.stored_input`), so
        that no checkpoint, the run's input included, holds their bytes: a top-level run's input, with a store (the
        Agent Server gives the graph its own). A nested run's input is its parent's state, kept by the parent."""
        return self.store is not None and not nested and isinstance(run_input, Mapping)

    def bulk_update_state(self, config: Any, supersteps: Sequence[Sequence[StateUpdate]]) -> Any:
        return super().bulk_update_state(config, self._checked_supersteps(supersteps))

    async def abulk_update_state(self, config: Any, supersteps: Sequence[Sequence[StateUpdate]]) -> Any:
        checked = await asyncio.to_thread(self._checked_supersteps, supersteps)
        return await super().abulk_update_state(config, checked)

    def _checked_supersteps(self, supersteps: Sequence[Sequence[StateUpdate]]) -> list[list[StateUpdate]]:
        """The updates once checked (`check_update`), what each writes past intake checked too
        (`past_intake.checked_values`): BadRunInput names the first problem."""
        _check_supersteps(self, supersteps)
        try:
            return [[u._replace(values=checked_values(_as_values(u.values), self.image_sources, self.store))
                     for u in superstep] for superstep in supersteps]
        except InputError as exc:
            raise BadRunInput(f"update: {exc}") from None


def check_run_input(graph: CompiledStateGraph, run_input: Any, *, nested: bool = False) -> None:
    """Refuse (BadRunInput) a run's input that LangGraph would drop or fail on before any node runs: an input that is
    not an object, a key that is not an input field (unless the graph runs `nested` in a parent graph, whose state,
    with fields of its own, is the input), `messages` that are not chat messages; for a `Command`, a `resume` (the
    graph never interrupts), a `goto` to no node of the graph, an update of no channel."""
    if run_input is None:
        return
    if isinstance(run_input, Command):
        _check_command(graph, run_input)
    elif isinstance(run_input, Mapping):
        _check_keys(run_input, set(run_input) if nested else _input_fields(graph), "input")
    else:
        raise BadRunInput(f"input: expected an object with the fields {', '.join(sorted(_input_fields(graph)))} "
                          f"(got {_shown(run_input)})")


def check_update(graph: CompiledStateGraph, values: Any, where: str) -> None:
    """Refuse (BadRunInput) a state update naming no channel of the graph, writing `messages` that are not chat
    messages, or writing what is not a list to a field that grows by lists (`state.appended`)."""
    if values is None:
        return
    if isinstance(values, Mapping):
        pairs: Iterable[tuple[Any, Any]] = values.items()
    elif isinstance(values, Sequence) and not isinstance(values, str) and all(
            isinstance(p, Sequence) and not isinstance(p, str) and len(p) == 2 for p in values):
        pairs = [tuple(p) for p in values]
    else:
        raise BadRunInput(f"{where}: expected an object of channel values (got {_shown(values)})")
    written = dict(pairs)
    _check_keys(written, _channels(graph), where)
    for name in sorted(_appended(graph) & set(written)):
        if not isinstance(_overwritten(written[name]), list):
            raise BadRunInput(f"{where}.{name}: expected a list, whose items are appended to the {name} "
                              f"(got {_shown(written[name])})")


def _check_command(graph: CompiledStateGraph, command: Command) -> None:
    if command.graph is not None:
        raise BadRunInput(f"command.graph: a run's Command goes to this graph; got {_shown(command.graph)}")
    if command.resume is not None:
        raise BadRunInput(f"command.resume: this graph never waits to be resumed (it does not interrupt), so "
                          f"{_shown(command.resume)} has nothing to resume; send input, or a Command with update or "
                          "goto")
    nodes = sorted(name for name in graph.builder.nodes)
    for target in targets(command):
        node = target.node if isinstance(target, Send) else target
        if node not in nodes:
            raise BadRunInput(f"command.goto: the graph has no node {_shown(node)}; its nodes are {', '.join(nodes)}")
    check_update(graph, command.update, "command.update")


def _check_supersteps(graph: CompiledStateGraph, supersteps: Sequence[Sequence[StateUpdate]]) -> None:
    for superstep in supersteps:
        for update in superstep:
            check_update(graph, update.values, "update")


def _check_keys(values: Mapping[Any, Any], known: set[str], where: str) -> None:
    unknown = sorted(map(str, set(values) - known))
    if unknown:
        raise BadRunInput(f"{where}.{unknown[0][:_SHOWN]}: the graph has no such field; it takes "
                          f"{', '.join(sorted(known))}")
    if _MESSAGES in values:
        _check_messages(values[_MESSAGES], f"{where}.{_MESSAGES}")


def _check_messages(value: Any, where: str) -> None:
    """Chat messages as LangGraph's `add_messages` takes them: a message or a list of them (LangChain messages,
    role/content objects, (role, content) pairs, strings); anything else would raise inside its reducer."""
    try:
        convert_to_messages(value if isinstance(value, list) else [value])
    except (NotImplementedError, ValueError, TypeError, KeyError, AttributeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise BadRunInput(f"{where}: expected chat messages (objects with role and content) (got {_shown(value)}: "
                          f"{first[:_SHOWN * 2]})") from None


def _as_values(values: Any) -> Any:
    """An update's values as a mapping where `check_update` accepted (channel, value) pairs."""
    return values if values is None or isinstance(values, Mapping) else dict(values)


def _nested(config: Any) -> bool:
    """Whether this run is a parent graph's task (LangGraph names the task in the run's `checkpoint_ns`)."""
    return bool(ensure_config(config).get("configurable", {}).get(_CHECKPOINT_NS))


def _input_fields(graph: CompiledStateGraph) -> set[str]:
    return set(graph.builder.schemas[graph.builder.input_schema])


def _channels(graph: CompiledStateGraph) -> set[str]:
    return set(graph.builder.channels)


def _appended(graph: CompiledStateGraph) -> set[str]:
    """The channels whose reducer is `state.appended`: a write is a list of items to append."""
    return {name for name, channel in graph.builder.channels.items()
            if isinstance(channel, BinaryOperatorAggregate) and channel.operator is appended}


def _overwritten(value: Any) -> Any:
    """What a write puts in a reduced field: an `Overwrite`'s value, in any of the forms LangGraph reads (the type,
    `{"__overwrite__": value}`, or the type's JSON form `{"type": "__overwrite__", "value": value}`), replaces the
    field; any other value is what is appended."""
    if isinstance(value, Overwrite):
        return value.value
    if isinstance(value, Mapping) and len(value) == 1 and _OVERWRITE in value:
        return value[_OVERWRITE]
    if isinstance(value, Mapping) and value.get("type") == _OVERWRITE and "value" in value:
        return value["value"]
    return value


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN else f"{shown[:_SHOWN]}... ({len(shown):,} characters)"
