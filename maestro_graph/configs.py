"""One source per config: a dataclass whose fields carry their help text, from which the `maestro` options, the
scripts' argparse options and the YAML loader are all built (the shape of TRL's `TrlParser`). A field is declared
once, with its default, its help and its checks (in the dataclass's `__post_init__`); nothing re-declares it.

    @dataclass
    class GRPOConfig:
        steps: int = setting(60, "Optimiser steps.")

Precedence when a run is configured: the dataclass default < a YAML file (`--config`) < a flag given on the
command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import types
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import yaml

from .errors import ConfigError

__all__ = ["setting", "help_of", "load_yaml", "build", "add_arguments", "from_arguments", "typer_options"]

C = TypeVar("C")


def setting(default: Any, help: str) -> Any:
    """A config field with its default and help text (read by every generated option)."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def help_of(cls: type, name: str) -> str:
    return next(f.metadata.get("help", "") for f in dataclasses.fields(cls) if f.name == name)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def _scalar_type(cls: type, name: str) -> type:
    """The field's type without Optional (int, float, str, bool, Path, list...)."""
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def build(cls: type[C], values: Mapping[str, Any], *, source: str | None = None) -> C:
    """The config from a mapping of its fields; an unknown key is a ConfigError listing the valid ones, and a bad
    value is the dataclass's own ConfigError, naming the file when there is one."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ConfigError(f"unknown keys {unknown}; valid: {sorted(names)}", file=source)
    try:
        return cls(**values)
    except ConfigError as exc:
        raise ConfigError(str(exc), file=source) from exc
    except TypeError as exc:  # a missing required field
        raise ConfigError(str(exc), file=source) from exc


def load_yaml(cls: type[C], path: str | Path, **overrides: Any) -> C:
    """A config from a YAML mapping of its fields; `overrides` that are not None win over the file."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of {cls.__name__} fields", file=str(path))
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return build(cls, raw, source=str(path))


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, exclude: tuple[str, ...] = ()) -> None:
    """`--field-name` options for a script (default: the dataclass's own), read back with `from_arguments`."""
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        kind = _scalar_type(cls, f.name)
        flag = f"--{f.name.replace('_', '-')}"
        help_text = f"{f.metadata.get('help', '')} (default: {_default(f)})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=None, help=help_text)


def from_arguments(cls: type[C], namespace: argparse.Namespace, **fixed: Any) -> C:
    """The config of parsed `add_arguments` options (the dataclass default where a flag was not given)."""
    names = {f.name for f in dataclasses.fields(cls)}
    given = {k: v for k, v in vars(namespace).items() if k in names and v is not None}
    return build(cls, {**given, **fixed})


def typer_options(cls: type, *, param: str = "config", exclude: tuple[str, ...] = ()) -> Callable:
    """Decorate a typer command that takes `param: cls`: the command gets one option per field (help and default
    from the dataclass) and `--config FILE.yaml`; it is called with the built config. Errors in values are the
    dataclass's ConfigErrors, reported by the command like any other."""
    from typing import Optional

    import typer

    config_fields = [f for f in dataclasses.fields(cls) if f.name not in exclude]

    def decorate(func: Callable) -> Callable:
        signature = inspect.signature(func)
        kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()
                if p.name != param]
        options = [inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[_scalar_type(cls, f.name)],
            default=typer.Option(None, f"--{f.name.replace('_', '-')}", show_default=False,
                                 help=f"{f.metadata.get('help', '')} (default: {_default(f)})"))
            for f in config_fields]
        config_file = inspect.Parameter(
            "config_file", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path],
            default=typer.Option(None, "--config", exists=True, dir_okay=False,
                                 help=f"YAML file of {cls.__name__} fields; flags given here override it."))

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = {f.name: kwargs.pop(f.name) for f in config_fields}
            file = kwargs.pop("config_file")
            raw = dict(yaml.safe_load(file.read_text()) or {}) if file else {}
            raw.update({k: v for k, v in given.items() if v is not None})
            try:
                config = build(cls, raw, source=str(file) if file else None)
            except ConfigError as exc:
                from rich.console import Console

                Console(stderr=True).print(f"[red]error:[/red] {exc}")
                raise typer.Exit(2) from None
            return func(**kwargs, **{param: config})

        command.__signature__ = signature.replace(parameters=[*kept, *options, config_file])  # type: ignore[attr-defined]
        return command

    return decorate
