"""Serving Maestro over HTTP: an OpenAI-compatible FastAPI app (plus LangServe routes with the `langserve` extra).

`create_app(registry, settings)` builds the app; `maestro serve` runs it with uvicorn. Importing this package
opens nothing and imports only the settings: FastAPI and the app load on first use of `create_app` and the other
app names, so `maestro --help` builds `serve`'s options from `ServeSettings` without them.
"""

from importlib import import_module
from typing import Any

from ...errors import ConfigError, missing_extra
from .settings import ServeSettings, startup_problem

__all__ = ["ServeSettings", "THREAD_HEADER", "create_app", "langserve_installed", "startup_problem"]

_LAZY = {"create_app": ".app", "langserve_installed": ".app", "THREAD_HEADER": ".episodes"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(_LAZY[name], __name__)
    except ModuleNotFoundError as exc:
        if exc.name not in SERVE_STACK:
            raise
        raise ConfigError(missing_extra("serve", "the Maestro server", exc.name)) from None
    return getattr(module, name)


SERVE_STACK = ("fastapi", "starlette", "uvicorn")
"""What the `serve` extra installs that the app imports: without it, `maestro serve` says which extra to add."""
