"""`maestro serve`: the OpenAI-compatible endpoint, configured by ServeSettings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

import typer

from ...backends.packages import missing_package
from ...core.configs import typer_options
from ...errors import MaestroError, missing_extra
from ..serve.settings import ServeSettings, startup_problem
from .common import err, fail, limit_threads
from .common import registry as load_registry
from .options import CacheTtlOpt, RegistryOpt

__all__ = ["serve"]


@typer_options(ServeSettings, param="settings", flags={
    "policy": ("--policy", "-p"), "policies": ("--allow-policy",), "allowed_image_hosts": ("--allow-image-host",),
    "image_dirs": ("--image-dir",), "request_timeout_s": ("--timeout-s",)})
def serve(
    settings: ServeSettings,
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (loopback by default)."),
    port: int = typer.Option(8321, min=1, max=65535, help="TCP port (not vLLM's 8000, so both run side by side)."),
    registry: Path | None = RegistryOpt,
    insecure: bool = typer.Option(False, "--insecure",
                                  help="Start without an API key even when one was named or the host is public."),
    cache_dir: Path | None = typer.Option(None, help="Persistent cache of expert calls (default: none)."),
    cache_url: str | None = typer.Option(None, "--cache-url", help="Shared expert cache on Redis "
                                            "(redis://HOST:PORT/DB) for all replicas; needs --cache-dir (fallback)."),
    cache_ttl_s: int = CacheTtlOpt,
    log_level: str = typer.Option("info", help="Log level of Maestro and uvicorn."),
    log_format: str = typer.Option("json", help="json (one object per line, with request and thread ids) | text."),
) -> None:
    """Serve an OpenAI-compatible endpoint (/v1/chat/completions, model `maestro`) and /healthz.

    LangServe routes are served at /maestro when the `langserve` extra is installed. Every ServeSettings field is an
    option (or a key of --config FILE.yaml)."""
    limit_threads()
    if (module := missing_package("fastapi", "uvicorn")) is not None:
        fail(missing_extra("serve", "`maestro serve`", module))
    import uvicorn

    from ..serve import create_app
    from ..serve.observability import configure_logging, log_config

    if log_format not in ("json", "text"):
        fail(f"--log-format {log_format!r}: choose json or text")
    fmt = cast(Literal["json", "text"], log_format)
    configure_logging(log_level, fmt)  # before the app loads anything that could write to stderr
    problem = startup_problem(settings, host, key_env_named="api_key_env" in settings.model_fields_set)
    if problem and not insecure:
        fail(problem)  # before the registry loads: a refusal costs nothing
    if problem:
        err.print(f"[yellow]warning:[/yellow] --insecure: {problem}")
    try:
        app = create_app(load_registry(registry, cache_dir, cache_url, cache_ttl_s=cache_ttl_s), settings)
    except MaestroError as exc:
        fail(str(exc))
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                log_config=log_config(log_level, fmt))
