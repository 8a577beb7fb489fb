"""One small hierarchy of errors, so callers can tell whose fault a failure was.

A config or skill error is the user's (fix the file); an invalid action is the policy's (it becomes an observation
and a penalty); an expert error is the expert's (the episode goes on without it); an input error is the request's.
"""

from __future__ import annotations

__all__ = [
    "MaestroError",
    "ConfigError",
    "SkillError",
    "InvalidActionError",
    "ExpertError",
    "ExpertTimeout",
    "ExpertUnavailable",
    "InputError",
    "Cancelled",
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


class ExpertError(MaestroError):
    """An expert failed while serving a call (expert's fault). `transient` marks a failure that may not recur
    (a dropped connection, an overloaded server), which the expert's handle retries."""

    def __init__(self, message: str, *, transient: bool = False):
        self.transient = transient
        super().__init__(message)


class ExpertTimeout(ExpertError):
    """An expert did not answer within its card's timeout."""


class ExpertUnavailable(ExpertError):
    """An expert cannot run on this machine (missing binary, package or endpoint)."""


class InputError(MaestroError):
    """The request itself is unusable: missing or corrupt image, empty question (user's fault)."""


class Cancelled(MaestroError):
    """The episode's caller is gone (timed out or disconnected): its remaining work is abandoned, not failed."""
