"""What an operator watches: a request id on every response and log line, structured JSON logs, and `/metrics` in
the Prometheus text format.

Logs are one JSON object per line on stderr, everything included: Python warnings (LangChain's and LangGraph's
deprecations) and other libraries' log records go through the same handler, progress bars are off, and a request
that fails or whose client goes away is logged with its request id (a disconnect as one INFO line, no traceback).

Each app has its own `CollectorRegistry` (two apps in one process, as in the tests, never share counters). Episode
metrics are recorded from what an episode already writes down (its stream events and its steps' call ledgers), so
nothing is measured twice; breaker states and queue depth are read when Prometheus scrapes.
"""

from __future__ import annotations

import contextvars
import json
import logging
import logging.config
import re
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...batch.metrics import EpisodeCounters
from ...core.environment import HF_HUB_DISABLE_PROGRESS_BARS
from ...types import StopReason

if TYPE_CHECKING:
    from ...episode.runner import EpisodeResult
    from ...registry import Registry

__all__ = ["EpisodeMetrics", "JsonLogFormatter", "REQUEST_ID_HEADER", "RequestIdMiddleware", "configure_logging",
           "log_config", "outcome_label", "request_id", "thread_id"]

REQUEST_ID_HEADER = "x-request-id"
REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
"""A client's request id is echoed only when it matches this (so no header or log injection); else one is made."""

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("maestro_request_id", default=None)
thread_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("maestro_thread_id", default=None)
"""The request and thread a log line belongs to; set by the middleware and the chat route, read by the formatter."""

access_log = logging.getLogger("maestro.http")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DECISION_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30)


class RequestIdMiddleware:
    """Echo the client's `x-request-id` when it is well-formed, else make one; every response carries it and every
    log line written while the request runs names it, the lines of its failure included: an exception leaves the
    id set, since the app's error handler and the server log it after this middleware returns, in the request's own
    task (the server runs each request in a task of its own, so the id ends with it). A client that goes away
    before its request is read or answered is not a failure: one INFO line, nothing re-raised."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        rid = given if REQUEST_ID_PATTERN.fullmatch(given) else f"req-{uuid.uuid4().hex}"
        token = request_id.set(rid)
        started = time.perf_counter()

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = rid
                # the access line, written here so it carries the request id (uvicorn's would not); the time is
                # until the response starts (a stream goes on after it)
                access_log.info("%s %s %d %.3fs", scope["method"], scope["path"], message["status"],
                                time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        except ClientDisconnect:
            access_log.info("%s %s client disconnected after %.3fs", scope["method"], scope["path"],
                            time.perf_counter() - started)
        request_id.reset(token)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request and thread ids, and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id.get(),
            "thread_id": thread_id.get(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def log_config(level: str, fmt: Literal["json", "text"]) -> dict[str, Any]:
    """A `logging.config.dictConfig` for `maestro serve` (also handed to uvicorn): Maestro's and uvicorn's loggers
    on stderr at `level`, one JSON object per line (`json`) or plain lines (`text`), and through the same handler
    every other logger's warnings and errors (the root logger: LangGraph's, transformers', and Python warnings once
    `configure_logging` captures them), which would otherwise reach stderr as bare text. uvicorn's access log is
    left off: the request-id middleware writes the access line instead."""
    plain = {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    formatter = {"()": JsonLogFormatter} if fmt == "json" else plain
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    loggers = {name: {"handlers": ["main"], "level": level.upper(), "propagate": False}
               for name in ("maestro", "uvicorn", "uvicorn.error")}
    libraries = max(logging.WARNING, logging.getLevelNamesMapping().get(level.upper(), logging.WARNING))
    return {"version": 1, "disable_existing_loggers": False, "formatters": {"main": formatter},
            "handlers": {"main": handler}, "loggers": loggers,
            "root": {"handlers": ["main"], "level": libraries}}


def configure_logging(level: str, fmt: Literal["json", "text"]) -> None:
    """Set up `maestro serve`'s logging before anything else loads, so nothing reaches stderr around it: the
    `log_config` handlers, Python warnings as log records (logger `py.warnings`; a warning raised while a library
    is imported comes before uvicorn's own set-up), and Hugging Face progress bars off (transformers' "Loading
    weights" bar redraws one line with carriage returns: no log reader can parse it). The bars are switched off
    through the variable the hub library reads when it is imported, which happens on an expert's first load."""
    HF_HUB_DISABLE_PROGRESS_BARS.set("1")
    logging.config.dictConfig(log_config(level, fmt))
    logging.captureWarnings(True)


def outcome_label(result: EpisodeResult) -> str:
    """How an episode ended, as the `outcome` label: answered, no_answer, input_error or cancelled."""
    if result.stop == StopReason.CANCELLED:
        return "cancelled"
    if result.stop == StopReason.INPUT_ERROR:
        return "input_error"
    return "answered" if result.answer is not None else "no_answer"


class EpisodeMetrics:
    """The served metrics of one app. `observe_event` sees each stream event, `observe_outcome` each finished
    episode with its raw steps, `observe_failure` a crashed one."""

    def __init__(self, registry: Registry, queue_depth: Any, in_flight: Any):
        self.registry = CollectorRegistry()
        r = self.registry
        self.counters = EpisodeCounters(r, "answered, no_answer, input_error, cancelled, failed")
        self.episode_seconds = Histogram("maestro_episode_seconds", "Wall-clock time of an episode on its worker.",
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.decision_seconds = Histogram("maestro_decision_seconds", "Time the policy took for one decision.",
                                          buckets=DECISION_BUCKETS, registry=r)
        Gauge("maestro_queue_depth", "Admitted episodes waiting for a worker.", registry=r).set_function(queue_depth)
        Gauge("maestro_episodes_in_flight", "Admitted episodes, running or queued.", registry=r).set_function(in_flight)
        r.register(_BreakerCollector(registry))

    def observe_event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "decision" and isinstance(event.get("latency_s"), (int, float)):
            self.decision_seconds.observe(event["latency_s"])

    def observe_outcome(self, result: EpisodeResult, raw_steps: Iterable[dict[str, Any]]) -> None:
        """Count the episode and the calls of the steps it ran now (replayed or restored steps were counted by the
        request that ran them)."""
        self.counters.episodes.labels(outcome_label(result)).inc()
        self.episode_seconds.observe(result.latency_s)
        self.counters.count_steps(raw_steps)

    def observe_failure(self) -> None:
        self.counters.episodes.labels("failed").inc()


class _BreakerCollector:
    """`maestro_breaker_open{model}`: 1 while a model's circuit breaker refuses calls, read at scrape time."""

    def __init__(self, registry: Registry):
        self._registry = registry

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily("maestro_breaker_open", "1 while the model's circuit breaker is open.",
                                   labels=["model"])
        for name, handle in self._registry.models.items():
            family.add_metric([name], 1.0 if handle.breaker.reason() else 0.0)
        yield family
