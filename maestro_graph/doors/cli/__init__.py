"""The `maestro` command: ask one question, predict over a task file, evaluate and train policies, serve, and
inspect the registry. This module assembles the command tree; each command lives in a module of its own."""

from __future__ import annotations

import sys

import typer

from ...operations.bench.cli import bench_app
from .ask import ask
from .cache import cache_clear
from .calibrate import calibrate
from .common import help_text
from .evaluate import evaluate
from .examples import examples
from .export import export
from .library import registry_show, skills_list
from .predict import predict
from .profile import registry_profile
from .reliability import reliability
from .serve import serve
from .settings import settings
from .train import train, train_lm

__all__ = ["app", "main"]

SUMMARY = "Maestro-Graph: answer questions about images by orchestrating expert models with a policy."

app = typer.Typer(help=SUMMARY, no_args_is_help=True, pretty_exceptions_enable=False)
skills_app = typer.Typer(help="Inspect the skill library.", no_args_is_help=True)
registry_app = typer.Typer(help="Inspect the model registry and its action space.", no_args_is_help=True)
cache_app = typer.Typer(help="The persistent cache of expert calls.", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"maestro-graph {version('maestro-graph')}")
        raise typer.Exit()


@app.callback(help=SUMMARY)
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    pass


for command, name in ((ask, "ask"), (predict, "predict"), (evaluate, "eval"), (calibrate, "calibrate"),
                      (train, "train"), (serve, "serve"), (reliability, "reliability"), (export, "export"),
                      (train_lm, "train-lm"), (examples, "examples"), (settings, "settings")):
    assert command.__doc__ is not None  # a command's docstring is its help
    app.command(name, help=help_text(command.__doc__))(command)
for group, command, name in ((skills_app, skills_list, "list"), (registry_app, registry_show, "show"),
                             (registry_app, registry_profile, "profile"), (cache_app, cache_clear, "clear")):
    assert command.__doc__ is not None  # a command's docstring is its help
    group.command(name, help=help_text(command.__doc__))(command)
app.add_typer(skills_app, name="skills")
app.add_typer(bench_app, name="bench")
app.add_typer(registry_app, name="registry")
app.add_typer(cache_app, name="cache")


def main() -> None:
    """The console entry of `python -m maestro_graph.doors.cli`."""
    sys.exit(app())
