"""Episodes for the HTTP app: admission (a cap on episodes in flight), a small worker pool that runs the graph off
the event loop, per-request cancellation, and thread ids backed by the SQLite checkpointer.

A thread is a conversation, the rule of LangGraph threads: a request asking the thread's current question again is
idempotent (an unfinished episode resumes from its last checkpoint, so one cut off by a crash or a timeout loses
nothing; a finished one replays its stored result, so a client retrying a lost response runs nothing twice); a
request asking another question starts a new episode on the thread, whose earlier finished episodes stay in its
`episodes` history (an interrupted one is dropped, as the Agent Server drops it); an unknown thread starts fresh.
A thread runs one episode at a time: this process refuses a second (409), and replicas sharing a Postgres
checkpointer take a lease on it there first (thread_lease.py), so only one of them runs it. A thread belongs to the
principal that made it (the API key, `Episode.owner`, kept in each checkpoint's metadata): for any other, reading
it or running on it is a 404, as if it did not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from starlette.concurrency import run_in_threadpool

from ...core.cancellation import Cancelled, cancellable
from ...episode.context import MaestroContext, RunSettings
from ...episode.graph import build_graph
from ...episode.image_refs import stored_input
from ...episode.runner import EpisodeResult, ThreadMode, checkpoint_step, episode_finished, thread_mode
from ...images.load import DECODE_MEMORY, working_set_bytes
from ...policy import PolicyNotOffered
from ...registry import Registry
from ...types import Step, StopReason, Turn
from .checkpoint_db import CheckpointDb, ImageDb, open_leases, prune_finished, store_errors
from .observability import EpisodeMetrics, outcome_label
from .observability import thread_id as thread_id_var
from .protocol import ApiError
from .settings import ServeSettings
from .thread_lease import Lease

__all__ = ["Episode", "EpisodeOutcome", "EpisodeService", "usage_of", "THREAD_HEADER"]

THREAD_HEADER = "X-Maestro-Thread-Id"
"""Request header naming the thread of an episode (same as the body's `thread_id`); responses echo it."""

log = logging.getLogger("maestro.serve")

Emit = Callable[[dict[str, Any]], None]
"""Receives each stream event of an episode (decision, step, answer); called from the worker thread."""


@dataclass
class Episode:
    """One admitted request: what to ask, under which budget, and on which thread (None: no checkpoint)."""

    question: str
    images: list[str]
    choices: list[str] | None
    context: MaestroContext
    thread_id: str | None
    cancel: threading.Event = field(default_factory=threading.Event)
    mode: ThreadMode = "new"
    history: list[Turn] = field(default_factory=list)
    """The conversation the client sent before the question (empty: on a thread, the thread's own history)."""
    lease: Lease | None = None
    """The thread's lease in a Postgres checkpoint database while the episode holds it (None: no such database)."""
    owner: str | None = None
    """The principal the request authenticated as (serve.principals; None without API keys): written into every
    checkpoint of the thread's runs, and a thread another principal made is not found."""
    deadline: float | None = None
    """When the request must be answered (`time.monotonic()`): its arrival plus `request_timeout_s`, so the time the
    door took to verify its images counts (None: `request_timeout_s` from when the episode starts)."""


@dataclass
class EpisodeOutcome:
    """A served episode: the episode's own record (the EpisodeResult every runner writes) and the thread it ran on."""

    result: EpisodeResult
    thread_id: str | None
    mode: ThreadMode
    usage: dict[str, int] = field(default_factory=lambda: usage_of([]))
    """OpenAI `usage`: the tokens of the chat-model calls inside the episode's steps (0 when none was made)."""

    def trace(self) -> dict[str, Any]:
        """The `maestro` extra field of a completion: the steps without their per-call ledgers."""
        return {
            "thread_id": self.thread_id,
            "stop": self.result.stop.value,  # why it ended, typed: `policy`, `budget`, `low confidence`...
            "stop_reason": self.result.stop_reason,
            "answer_source": self.result.answer_source,
            "confidence": self.result.confidence,
            "steps": [s.model_dump(mode="json", exclude={"calls"}) for s in self.result.steps],
            "cost": round(self.result.cost, 6),
            "latency_s": round(self.result.latency_s, 4),
            "resumed": self.mode == "resume",
            "replayed": self.mode == "replay",
        }


class EpisodeService:
    """Runs episodes of one compiled graph. `admit` must succeed before `start`; the slot is released when the
    worker finishes (not when a client gives up), so the cap bounds the threads really busy."""

    def __init__(self, registry: Registry, settings: ServeSettings, *,
                 checkpointer: CheckpointDb | None = None, store: ImageDb | None = None):
        self.settings = settings
        self.checkpointer = checkpointer
        self.store = store
        self._store_errors = store_errors(checkpointer)
        self._leases = open_leases(checkpointer, settings)
        self.policies = settings.catalog()
        self.graph = build_graph(registry, self.policies.get(), policies=self.policies, checkpointer=checkpointer,
                                 store=store)
        self._slots = threading.BoundedSemaphore(settings.max_episodes)
        self._pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="maestro-episode")
        self._lock = threading.Lock()
        self._busy_threads: set[str] = set()
        self.in_flight = 0
        self.running = 0
        self.metrics = EpisodeMetrics(registry, queue_depth=lambda: max(0, self.in_flight - self.running),
                                      in_flight=lambda: self.in_flight)

    @property
    def persistent(self) -> bool:
        return self.checkpointer is not None

    def context(self, asked: RunSettings) -> MaestroContext:
        """The run context of a request (its settings already validated where the request entered, the same on every
        door): its own budget within the server's, one of the offered policies, its `min_confidence`."""
        policy = asked.policy
        if policy is not None:
            try:
                self.policies.check(policy)
            except PolicyNotOffered as exc:  # the client's error; the message lists the offered names only
                raise ApiError(400, "invalid_policy", str(exc), param="policy") from exc
        turns = min(asked.max_turns or self.settings.max_turns, self.settings.max_turns)
        cost = min(self.settings.max_cost if asked.max_cost is None else asked.max_cost, self.settings.max_cost)
        return MaestroContext(max_turns=turns, max_cost=cost, policy=policy, greedy=True,
                              reach_floor=self.settings.reach_floor, episodes_kept=self.settings.episodes_kept,
                              min_confidence=asked.min_confidence or 0.0)

    def thread_for(self, requested: str | None) -> str | None:
        """The thread id of a request: the client's, a new one when checkpointing is on, or None."""
        if requested is None:
            return f"thread-{uuid.uuid4().hex}" if self.persistent else None
        if not self.persistent:
            raise ApiError(400, "persistence_disabled",
                           "thread ids need checkpoints: start the server with --checkpoint-db", param="thread_id")
        return requested

    def _refuse_busy(self, thread_id: str | None) -> None:
        """409 when the thread is running an episode on this replica (called under the lock)."""
        if thread_id is not None and thread_id in self._busy_threads:
            raise self._busy(thread_id, "")

    def _busy(self, thread_id: str, where: str) -> ApiError:
        """The 409 of a busy thread. Retry-After is the lease time: by then a holder that vanished has lost it."""
        return ApiError(409, "thread_busy", f"thread {thread_id!r} is running an episode now{where}; retry later",
                        param="thread_id", headers={"Retry-After": str(self.settings.thread_lease_s)})

    def admit(self, thread_id: str | None) -> None:
        """Claim the thread (409 when it is running an episode) and take an episode slot (429 when all are taken)."""
        with self._lock:
            self._refuse_busy(thread_id)
            if not self._slots.acquire(blocking=False):
                raise ApiError(429, "too_many_episodes",
                               f"all {self.settings.max_episodes} episode slots are busy; retry later",
                               headers={"Retry-After": "1"})
            if thread_id is not None:
                self._busy_threads.add(thread_id)
            self.in_flight += 1

    def check_capacity(self, count: int, thread_id: str | None = None) -> None:
        """Refuse work of `count` episodes before any of it starts: 409 when its thread is running an episode (the
        same answer `admit` gives, so a busy thread is never reported as a full server), 429 when the free slots
        cannot hold it. A batch runs whole or not at all, and a stream is refused before its response begins. A
        check, not a reservation: `admit` still decides, so a request that loses a race meets its refusal there."""
        with self._lock:
            self._refuse_busy(thread_id)
            free = self.settings.max_episodes - self.in_flight
        if count > free:
            raise ApiError(429, "too_many_episodes",
                           f"{count} episode(s) asked for and {free} of {self.settings.max_episodes} episode slots "
                           "free; retry later", headers={"Retry-After": "1"})

    def _release(self, thread_id: str | None) -> None:
        if self._leases is not None and thread_id is not None:
            self._leases.release(thread_id)  # before the thread is free here: a lock re-taken first would count twice
        with self._lock:
            self._busy_threads.discard(thread_id)  # type: ignore[arg-type]
            self.in_flight -= 1
        self._slots.release()

    def start(self, episode: Episode, emit: Emit) -> Future:
        """Run an admitted episode on a worker; the future holds its EpisodeOutcome. Reads the thread's checkpoint
        first (blocking: call it off the event loop); on any refusal the slot is given back."""
        def observed(event: dict[str, Any]) -> None:
            self.metrics.observe_event(event)
            emit(event)

        try:
            with self._checkpoint_store(episode):
                self._hold(episode)
                self._classify(episode)
            context = contextvars.copy_context()  # the worker's log lines name this request and thread
            context.run(thread_id_var.set, episode.thread_id)
            future = self._pool.submit(context.run, self._run, episode, observed)
        except BaseException:
            self._release(episode.thread_id)
            raise
        future.add_done_callback(lambda done: self._finish(episode, done))
        return future

    def _finish(self, episode: Episode, future: Future) -> None:
        """Give the slot back; a crashed episode is counted and logged here (the caller reports it to the client)."""
        self._release(episode.thread_id)
        if not future.cancelled() and future.exception() is not None:
            self.metrics.observe_failure()

    @contextlib.contextmanager
    def _checkpoint_store(self, episode: Episode) -> Iterator[None]:
        """A lost checkpoint database fails the request with a retryable 503; the thread keeps every step
        committed before the loss, so the same request later resumes it."""
        try:
            yield
        except self._store_errors as exc:
            log.warning("checkpoint database lost: %s: %s", exc.__class__.__name__, exc)
            raise self._store_lost(episode, f"the checkpoint database is unreachable ({exc.__class__.__name__})") \
                from None

    @staticmethod
    def _store_lost(episode: Episode, what: str) -> ApiError:
        """The retryable 503 of a request whose checkpoint database went away: the thread keeps every step committed
        before the loss, so the same request later resumes it."""
        resume = f"; retry with thread id {episode.thread_id} to resume it" if episode.thread_id else ""
        return ApiError(503, "checkpoints_unavailable", f"{what}{resume}",
                        headers={"Retry-After": "1", **({THREAD_HEADER: episode.thread_id} if episode.thread_id
                                                         else {})})

    def _hold(self, episode: Episode) -> None:
        """Take the thread's lease in a Postgres checkpoint database (409 while another replica runs the thread).
        Taken before the thread's checkpoint is read, so a thread taken over from a dead replica resumes from the
        last step that replica committed."""
        if self._leases is None or episode.thread_id is None:
            return
        episode.lease = self._leases.try_acquire(episode.thread_id, episode.cancel)
        if episode.lease is None:
            raise self._busy(episode.thread_id, " on another replica")

    def _config(self, episode: Episode) -> RunnableConfig:
        config: RunnableConfig = {"recursion_limit": episode.context.recursion_limit}
        if episode.thread_id is not None:
            config["configurable"] = {"thread_id": episode.thread_id}
            config["metadata"] = {_OWNER: episode.owner}  # LangGraph writes it into each checkpoint of the run
        return config

    def _classify(self, episode: Episode) -> None:
        """Same question as the thread's current one: resume (unfinished) or replay (finished); else a new
        episode on the thread (see the module docstring). Another principal's thread is a 404."""
        if episode.thread_id is not None:
            snapshot = self.graph.get_state(self._config(episode))
            self._refuse_stranger(snapshot, episode.thread_id, episode.owner)
            episode.mode = thread_mode(snapshot, episode.question)

    def check_owner(self, thread_id: str, principal: str | None) -> None:
        """404 when the thread exists and another principal made it (blocking: call it off the event loop)."""
        if self.persistent:
            self._refuse_stranger(self.graph.get_state({"configurable": {"thread_id": thread_id}}), thread_id,
                                  principal)

    @staticmethod
    def _refuse_stranger(snapshot: Any, thread_id: str, principal: str | None) -> None:
        if snapshot.values and (snapshot.metadata or {}).get(_OWNER) != principal:
            raise _not_found(thread_id)

    def _run(self, episode: Episode, emit: Emit) -> EpisodeOutcome:
        with self._lock:
            self.running += 1
        try:
            with self._checkpoint_store(episode):
                outcome, ran = self._episode(episode, emit)
        finally:
            with self._lock:
                self.running -= 1
        if episode.lease is not None and episode.lease.lost:  # another replica may be running the thread now
            raise self._store_lost(episode, "the connection holding the thread's lease in the checkpoint database "
                                   "was lost, so the episode stopped at its last step")
        if self.checkpointer is not None and episode.thread_id and outcome.result.stop != StopReason.CANCELLED:
            # between episodes, the thread's lease still held: bound its storage (ServeSettings.checkpoints_kept)
            try:
                prune_finished(self.checkpointer, episode.thread_id, keep=self.settings.checkpoints_kept)
            except self._store_errors as exc:  # housekeeping: the answer stands, and the next episode prunes
                log.warning("thread not pruned: %s: %s", exc.__class__.__name__, exc)
        self.metrics.observe_outcome(outcome.result, ran)
        log.info("episode %s: %s in %.2f s", outcome_label(outcome.result), outcome.result.stop_reason,
                 outcome.result.latency_s)
        return outcome

    def _episode(self, episode: Episode, emit: Emit) -> tuple[EpisodeOutcome, list[dict[str, Any]]]:
        """Run, resume or replay the episode; returns its outcome and the raw steps this request ran."""
        start = time.perf_counter()
        done_before = 0
        config = self._config(episode)
        if episode.mode == "new":  # the images as references to the thread's image store (episode.image_refs)
            graph_input: dict[str, Any] | None = stored_input(self.store, {
                "question": episode.question, "images": episode.images, "choices": episode.choices,
                **({"history": episode.history} if episode.history else {})})
        else:
            values = self.graph.get_state(config).values
            for step in values.get("steps", []):
                emit({"event": "step", **_public(step), "restored": True})
            if episode.mode == "replay":
                emit({"event": "answer", "answer": values.get("answer"), "stop_reason": values.get("stop_reason")})
                return self._outcome(values, episode, start, finished=True), []
            graph_input = None  # an interrupted episode continues from its last checkpoint
            done_before = len(values.get("steps", []))
        values = {}
        if not episode.cancel.is_set():
            # "sync" durability: a step's checkpoint is on disk before the next step starts, so a crash loses
            # at most the step that was running (LangGraph refuses the option when there is no checkpointer)
            durability = {"durability": "sync"} if self.persistent else {}
            # cancelling abandons a waiting expert call or skill step: the node raises Cancelled and commits
            # nothing, so a resumed thread runs that step again
            # the episode holds its images' working set (a follow-up's: its history's) in the process's image memory,
            # waiting for room as long as its request may; its own decodes are inside it
            images = episode.images or list(dict.fromkeys(i for turn in episode.history
                                                          for i in turn.get("images", [])))
            with cancellable(episode.cancel), contextlib.suppress(Cancelled), \
                    DECODE_MEMORY.reserve(working_set_bytes(images), "the episode's images"):
                for mode, chunk in self.graph.stream(graph_input, config, context=episode.context,
                                                     stream_mode=["custom", "values"], **durability):
                    if mode == "custom":  # emitted from inside a node: its step is not committed yet
                        emit(chunk)
                        continue
                    values = chunk
                    if episode.cancel.is_set():  # the client is gone or timed out: stop at this step boundary
                        break
        finished = bool(values.get("stop")) and not episode.cancel.is_set()
        return self._outcome(values, episode, start, finished=finished), values.get("steps", [])[done_before:]

    @staticmethod
    def _outcome(values: dict[str, Any], episode: Episode, start: float, *, finished: bool) -> EpisodeOutcome:
        result = EpisodeResult(
            answer=values.get("answer"), steps=[Step.model_validate(s) for s in values.get("steps", [])],
            stop=StopReason(values.get("stop") or StopReason.POLICY) if finished else StopReason.CANCELLED,
            stop_detail=values.get("stop_detail") if finished else None, latency_s=time.perf_counter() - start,
            answer_source=values.get("answer_source"), confidence=values.get("confidence"))
        return EpisodeOutcome(result, episode.thread_id, episode.mode, usage=usage_of(values.get("steps", [])))

    async def complete(self, episode: Episode, emit: Emit = lambda _: None) -> EpisodeOutcome:
        """Admit, run on a worker and wait, within the request timeout (504 after it: the episode stops at its
        next step and, with checkpoints, can be resumed by its thread id). A request cancelled meanwhile (its client
        gone: `client_gone.CancelOnDisconnect`; or the server stopping) cancels the episode."""
        self.admit(episode.thread_id)
        future = asyncio.wrap_future(await self._started(episode, emit))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=self._time_left(episode))
        except TimeoutError:
            episode.cancel.set()
            raise self._timeout(episode) from None
        except asyncio.CancelledError:
            self._client_gone(episode)
            raise

    @staticmethod
    def _client_gone(episode: Episode) -> None:
        """Cancel the episode of a client that went away, and say so once in the log."""
        if not episode.cancel.is_set():
            episode.cancel.set()
            log.info("client disconnected: episode cancelled")

    async def open_stream(self, episode: Episode) -> AsyncGenerator[dict[str, Any] | EpisodeOutcome, None]:
        """Admit and start the episode now (so a refusal is the request's own HTTP error, not a stream chunk),
        then iterate its events as they happen and its EpisodeOutcome last, within the request timeout (the
        iterator raises the 504 ApiError after it). A consumer that stops early, a client gone, cancels it."""
        self.admit(episode.thread_id)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def emit(event: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        future = asyncio.wrap_future(await self._started(episode, emit))
        return self._pump(episode, future, events, loop.time() + self._time_left(episode))

    def _time_left(self, episode: Episode) -> float:
        """The seconds an episode may take: what is left of its request's deadline, else the whole request timeout."""
        left = self.settings.request_timeout_s if episode.deadline is None else episode.deadline - time.monotonic()
        return max(0.0, left)

    async def _started(self, episode: Episode, emit: Emit) -> Future:
        """`start` off the event loop. A request cancelled meanwhile (its client gone) gets the episode cancelled:
        the worker thread finishes starting it, and it then runs nothing."""
        try:
            return await run_in_threadpool(self.start, episode, emit)
        except asyncio.CancelledError:
            episode.cancel.set()
            raise

    async def _pump(self, episode: Episode, future: asyncio.Future, events: asyncio.Queue,
                    deadline: float) -> AsyncGenerator[dict[str, Any] | EpisodeOutcome, None]:
        loop = asyncio.get_running_loop()
        getter: asyncio.Future | None = None
        try:
            while not (future.done() and events.empty()):
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, future}, timeout=max(0.0, deadline - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                if not done:
                    episode.cancel.set()
                    raise self._timeout(episode)
            yield future.result()
        finally:
            if getter is not None and not getter.done():  # cancelled while waiting: no task left pending
                getter.cancel()
            if not future.done():  # the consumer stopped early: its client went away
                self._client_gone(episode)

    def _timeout(self, episode: Episode) -> ApiError:
        """The 504 of an episode cut off by the request timeout: it stops at its next step; with checkpoints its
        thread id resumes it."""
        resume = f"; resume it with thread id {episode.thread_id}" if episode.thread_id else ""
        return ApiError(504, "timeout",
                        f"the episode did not finish within {self.settings.request_timeout_s:g} s{resume}",
                        headers={THREAD_HEADER: episode.thread_id} if episode.thread_id else None)

    def history(self, thread_id: str, principal: str | None) -> dict[str, Any]:
        """A thread's current result (its answer with who gave it and how sure it is, as the chat response's
        `maestro` field has them) and its checkpoints, newest first (404 when unknown, or another principal's)."""
        if not self.persistent:
            raise ApiError(400, "persistence_disabled", "thread history needs --checkpoint-db")
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        snapshot = self.graph.get_state(config)
        if not snapshot.values:
            raise _not_found(thread_id)
        self._refuse_stranger(snapshot, thread_id, principal)
        values = snapshot.values
        return {
            "thread_id": thread_id,
            "finished": episode_finished(snapshot),
            "next": list(snapshot.next),
            "question": values.get("question"),
            "answer": values.get("answer"),
            "answer_source": values.get("answer_source"),
            "confidence": values.get("confidence"),
            "stop": values.get("stop"),
            "stop_reason": values.get("stop_reason"),
            "steps": [_public(s) for s in values.get("steps", [])],
            "episodes": [{**e, "steps": [_public(s) for s in e.get("steps", [])]} for e in values.get("episodes", [])],
            "checkpoints": [
                {"checkpoint_id": s.config["configurable"]["checkpoint_id"], "step": checkpoint_step(s),
                 "next": list(s.next), "steps_done": len(s.values.get("steps", []))}
                for s in self.graph.get_state_history(config)
            ],
        }

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._leases is not None:
            self._leases.close()
        if self.store is not None:  # first: on Postgres it shares the checkpointer's pool
            self.store.stop_ttl_sweeper()
            self.store.conn.close()
        if self.checkpointer is not None:
            self.checkpointer.conn.close()


_OWNER = "maestro_owner"
"""The checkpoint-metadata key holding the principal that made a thread."""


def _not_found(thread_id: str) -> ApiError:
    """The one answer for a thread that does not exist and for another principal's: nothing tells them apart."""
    return ApiError(404, "thread_not_found", f"no thread {thread_id!r}", param="thread_id")


def usage_of(steps: list[dict[str, Any]]) -> dict[str, int]:
    """Prompt and completion tokens summed over every expert call of the steps (their per-call ledgers)."""
    calls = [c for step in steps for c in step.get("calls", [])]
    prompt = sum(c.get("prompt_tokens", 0) for c in calls)
    completion = sum(c.get("completion_tokens", 0) for c in calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _public(step: dict[str, Any]) -> dict[str, Any]:
    """A step as clients see it: the recorded fields without the per-call ledger."""
    return {k: v for k, v in step.items() if k != "calls"}
