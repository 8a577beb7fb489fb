"""Serving Maestro over HTTP: an OpenAI-compatible FastAPI app (plus LangServe routes with the `langserve` extra).

`create_app(registry, settings)` builds the app; `maestro serve` runs it with uvicorn. Importing this package
imports FastAPI but opens nothing.
"""

from .app import create_app, langserve_installed
from .episodes import THREAD_HEADER
from .settings import ServeSettings, startup_problem

__all__ = ["ServeSettings", "THREAD_HEADER", "create_app", "langserve_installed", "startup_problem"]
