"""One small hierarchy of errors, so callers can tell whose fault a failure was.

A config or skill error is the user's (fix the file); an invalid action is the policy's (it becomes an observation
and a penalty); an expert error is the expert's (the episode goes on without it); an input error is the request's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "MaestroError",
    "NoLiveWorker",
    "ConfigError",
    "SkillError",
    "InvalidActionError",
    "ExpertError",
    "ExpertRejected",
    "ExpertFailure",
    "ExpertTimeout",
    "ExpertUnavailable",
    "InputError",
    "missing_extra",
    "Cancelled",
    "ServiceUnavailable",
    "import_extra",
    "first_validation_problem",
]


class MaestroError(Exception):
    """Base of every error Maestro-Graph raises on purpose."""


class ConfigError(MaestroError):
    """A registry config, model card or task file is wrong. The message names the file and the field."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        where = ", ".join(p for p in (f"file {file}" if file else "", f"field {field!r}" if field else "") if p)
        super().__init__(f"{where}: {message}" if where else message)


class SkillError(ConfigError):
    """A skill folder is invalid (bad SKILL.md, missing entry point)."""


class InvalidActionError(MaestroError):
    """The policy asked for something that is not in the action space (policy's fault)."""


class ExpertFailure(StrEnum):
    """What went wrong in an expert call, set where the error is raised (reports count these, never parse text)."""

    CRASH = "crash"
    """The expert's own code raised."""
    TIMEOUT = "timeout"
    """No answer (or no free concurrency slot) within the card's timeout."""
    UNAVAILABLE = "unavailable"
    """The expert cannot run here (missing binary, package or endpoint)."""
    BREAKER_OPEN = "breaker open"
    """Refused uncharged: the circuit breaker is open after failed calls in a row."""
    OVERSIZED = "oversized result"
    WRONG_TYPE = "wrong result type"
    """A result of another type than the method declares (garbage)."""
    INJECTED = "injected fault"
    """A fault the registry's fault injection raised on purpose (maestro reliability)."""
    REJECTED = "rejected input"
    """The expert answered that it cannot take what it was given (an expression it cannot parse): it is healthy."""


class ExpertError(MaestroError):
    """An expert failed while serving a call (expert's fault). `transient` marks a failure that may not recur
    (a dropped connection, an overloaded server), which the expert's handle retries; `failure` says what kind."""

    failure = ExpertFailure.CRASH

    def __init__(self, message: str, *, transient: bool = False, failure: ExpertFailure | None = None):
        self.transient = transient
        if failure is not None:
            self.failure = failure
        super().__init__(message)


class ExpertRejected(ExpertError):
    """An expert declined its input as malformed for it: a deterministic outcome of that input, never retried, and
    never held against the expert (its circuit breaker counts it as an answer)."""

    failure = ExpertFailure.REJECTED


class ExpertTimeout(ExpertError):
    """An expert did not answer within its card's timeout."""

    failure = ExpertFailure.TIMEOUT


class ExpertUnavailable(ExpertError):
    """An expert cannot run on this machine (missing binary, package or endpoint), or its breaker is open."""

    failure = ExpertFailure.UNAVAILABLE


class InputError(MaestroError):
    """The request itself is unusable: missing or corrupt image, empty question (user's fault)."""


class Cancelled(MaestroError):
    """The episode's caller is gone (timed out or disconnected): its remaining work is abandoned, not failed."""


class ServiceUnavailable(MaestroError):
    """A service the operator named (a Ray cluster, Redis, Postgres) cannot be reached: the operator's to fix. The
    message names the service and its URL, so a command can stop with it at start instead of a traceback."""

    def __init__(self, service: str, url: str, reason: str, *, retryable: bool = False):
        self.service = service
        self.url = url
        self.retryable = retryable
        """The service was reachable before and the request may succeed when retried (a lost connection)."""
        super().__init__(f"{service} at {url} is unreachable: {reason}")


class NoLiveWorker(MaestroError):
    """A batch run on Ray gave up: no worker was alive (none placed yet, or every one lost with its node) for the
    run's `--worker-wait-s`. The items that finished were handed back, so their records are kept; `finished` says
    how many."""

    def __init__(self, message: str, *, finished: int):
        self.finished = finished
        super().__init__(message)


def import_extra(module: str, extra: str, feature: str) -> Any:
    """Import an optional dependency; missing, it is a ConfigError naming the extra that installs it (an optional
    feature the user asked for must say how to get it, not fail with ModuleNotFoundError)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigError(missing_extra(extra, feature, exc.name)) from None


def missing_extra(extra: str, feature: str, module: str | None) -> str:
    """The message for an optional stack that is not installed: which extra, and the command that adds it."""
    return f"{feature} needs the `{extra}` extra ({module} is not installed): pip install 'maestro-graph[{extra}]'"


def first_validation_problem(exc: ValidationError) -> tuple[str, str]:
    """(field path, message) of every problem, joined, for an error that names the field."""
    fields, messages = [], []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        fields.append(loc)
        messages.append(f"{loc}: {err['msg']}" + (f" (got {err['input']!r})" if "input" in err else ""))
    return ", ".join(fields), "; ".join(messages)
