"""One source per config: a dataclass (or a pydantic model) whose fields carry their help text, from which the
`maestro` options, the scripts' argparse options and the YAML loader are all built (the shape of TRL's
`TrlParser`). A field is declared once, with its default, its help and its checks (in the dataclass's
`__post_init__`, or the model's validators); nothing re-declares it.

    @dataclass
    class NeuralGRPOConfig:
        steps: int = setting(120, "Optimiser steps.")

Precedence when a run is configured: the dataclass default < a YAML file (`--config`) < a flag given on the
command line. The budgets of an episode are defined here once, for every config and command that defaults them.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import Field

from ..errors import ConfigError
from .operator_yaml import read_yaml

__all__ = ["DEFAULT_MAX_TURNS", "DEFAULT_MAX_COST", "MAX_TURNS", "MAX_COST", "DEFAULT_EPISODES_KEPT",
           "MAX_EPISODES_KEPT", "DEFAULT_CHECKPOINTS_KEPT", "DEFAULT_WORKER_WAIT_S", "Budget", "setting", "help_of",
           "load_yaml", "build", "add_arguments", "from_arguments", "typer_options", "typer_option", "SettingValue",
           "setting_values"]

C = TypeVar("C")

DEFAULT_MAX_TURNS = 4
"""The turn budget of an episode where a run names none: the run context's, the CLI's, the server's and the neural
policy's training default (the shipped checkpoint was trained and measured with it)."""
DEFAULT_MAX_COST = 10.0
"""The cost budget of an episode where a run names none, in card cost units (a call costs 0.05 to 1 in the packaged
registry, so the turn budget ends an episode first)."""
MAX_TURNS = 64
"""The largest turn budget a run may ask for: every turn may call an expert, and a run's context is the client's."""
DEFAULT_EPISODES_KEPT = 32
"""The finished episodes a thread keeps where a run names no number (the latest; see MaestroContext.episodes_kept)."""
MAX_EPISODES_KEPT = 1024
"""The most a run may ask a thread to keep: every checkpoint of the thread holds them."""
DEFAULT_CHECKPOINTS_KEPT = 16
"""The checkpoints a SQLite thread keeps once an episode ends (the latest ones: a resumed or replayed question needs
only the last, and `/v1/threads/ID` lists them); each episode writes about two a turn, each holding the whole
state (episode.storage.prune_thread)."""
MAX_COST = 1_000.0
"""The largest cost budget a run may ask for, in card cost units."""
DEFAULT_WORKER_WAIT_S = 600.0
"""How long a batch run on Ray waits with no live worker (none placed yet, or every one lost) before it gives up:
long enough for an autoscaler to add a node, short enough that a lost cluster ends the run."""


def setting(default: Any, help: str, *, research: bool = False) -> Any:
    """A config field with its default and help text (read by every generated option). A `research` setting is an
    experiment's switch that the shipped recipe leaves at its default: it keeps its option, hidden from `--help`
    (which lists it by name), so the help shows what a user sets."""
    metadata = {"help": help, "research": research}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class Budget:
    """The budget of one episode, the first fields of the run context (`episode.context.MaestroContext`): declared
    here with their help and bounds so the commands that take a budget build their options from it without loading
    the graph."""

    max_turns: Annotated[int, Field(ge=1, le=MAX_TURNS)] = setting(
        DEFAULT_MAX_TURNS, "Most expert calls per episode before answering.")
    max_cost: Annotated[float, Field(ge=0, le=MAX_COST)] = setting(
        DEFAULT_MAX_COST, "Cost budget of an episode, in card cost units.")


@dataclasses.dataclass(frozen=True)
class _Field:
    """One field of a config class, whichever kind declares it (a dataclass `setting`, a pydantic `Field`)."""

    name: str
    kind: type
    """The option's type: the field's own without Optional; str where a union admits several (a path or a URL)."""
    many: bool
    """A list or tuple: a repeatable option."""
    default: Any
    help: str
    research: bool = False


def _option_type(hint: Any) -> tuple[type, bool]:
    """(scalar type, repeatable) of a field's type hint; a mapping is (dict, False) and gets no option."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(kinds) > 1:
            return str, False
        hint = kinds[0]
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return typing.get_args(hint)[0], True
    if origin is dict or hint is dict:
        return dict, False
    return hint, False


def _fields(cls: type) -> list[_Field]:
    """The fields of a dataclass or a pydantic model, in declaration order."""
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        found = [(f.name, _default(f), f.metadata.get("help", ""), f.metadata.get("research", False))
                 for f in dataclasses.fields(cls)]
    else:  # a pydantic model
        found = [(name, info.get_default(call_default_factory=True), info.description or "", False)
                 for name, info in cls.model_fields.items()]  # type: ignore[attr-defined]
    return [_Field(name, *_option_type(hints[name]), default, help_text, research)
            for name, default, help_text, research in found]


def help_of(cls: type, name: str) -> str:
    return next(f.help for f in _fields(cls) if f.name == name)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def build(cls: type[C], values: Mapping[str, Any], *, source: str | None = None) -> C:
    """The config from a mapping of its fields; an unknown key is a ConfigError listing the valid ones, a key the
    config renamed (its `RENAMED` mapping, old name to new) one naming the new spelling, and a bad value is the
    config's own ConfigError (a pydantic model's first validation problem), naming the file when there
    is one."""
    from pydantic import BaseModel, ValidationError

    from ..errors import first_validation_problem

    fields = {f.name: f for f in _fields(cls)}
    renamed = getattr(cls, "RENAMED", {})
    old = sorted(set(values) & set(renamed))
    if old:
        new = renamed[old[0]]
        raise ConfigError(f"{old[0]!r} is now spelled {new!r} (the flag --{new.replace('_', '-')}): rename it, its "
                          "meaning is unchanged", file=source, field=old[0])
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown keys {unknown}; valid: {sorted(fields)}", file=source)
    try:
        if isinstance(cls, type) and issubclass(cls, BaseModel):
            return cls.model_validate(dict(values))  # type: ignore[return-value]
        return cls(**{name: _number(fields[name], value, source) for name, value in values.items()})
    except ConfigError as exc:
        raise ConfigError(str(exc), file=source) from exc
    except ValidationError as exc:
        raise ConfigError(first_validation_problem(exc)[1], file=source) from None
    except TypeError as exc:  # a missing required field
        raise ConfigError(str(exc), file=source) from exc


def _number(f: _Field, value: Any, source: str | None) -> Any:
    """A dataclass field's value with its number type: YAML reads `2e-3` (no dot) as a string and `1` as an int, and
    a dataclass checks nothing, so a float field takes both; anything else that is not a number is refused by name."""
    if f.many or f.kind not in (int, float) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and (f.kind is float or isinstance(value, int)):
        return f.kind(value)
    try:
        if f.kind is float and isinstance(value, str):
            return float(value)
    except ValueError:
        pass
    raise ConfigError(f"{f.name}={value!r} is not {'a number' if f.kind is float else 'an integer'}", file=source,
                      field=f.name)


def _read_yaml(cls: type, path: str | Path) -> dict[str, Any]:
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of {cls.__name__} fields", file=str(path))
    return raw


def load_yaml(cls: type[C], path: str | Path, **overrides: Any) -> C:
    """A config from a YAML mapping of its fields; `overrides` that are not None win over the file."""
    raw = _read_yaml(cls, path)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return build(cls, raw, source=str(path))


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, exclude: tuple[str, ...] = ()) -> None:
    """`--field-name` options for a script (default: the dataclass's own), read back with `from_arguments`."""
    for f in _fields(cls):
        if f.name in exclude or f.kind is dict:
            continue
        flag = f"--{f.name.replace('_', '-')}"
        help_text = f"{f.help} (default: {f.default})"
        if f.kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif f.many:
            parser.add_argument(flag, type=f.kind, default=None, help=help_text, action="append")
        else:
            parser.add_argument(flag, type=f.kind, default=None, help=help_text)


def from_arguments(cls: type[C], namespace: argparse.Namespace, **fixed: Any) -> C:
    """The config of parsed `add_arguments` options (the dataclass default where a flag was not given)."""
    names = {f.name for f in _fields(cls)}
    given = {k: v for k, v in vars(namespace).items() if k in names and v is not None}
    return build(cls, {**given, **fixed})


def typer_option(cls: type, name: str, *flags: str, **click: Any) -> Any:
    """A typer option for one field of `cls`, with the field's default and help: for a command that takes a single
    setting of a config (the run context's budgets) rather than the whole config. `click` passes checks such as
    `min=1`, or a help text of the command's own."""
    import typer

    f = next(f for f in _fields(cls) if f.name == name)
    return typer.Option(f.default, *(flags or (f"--{name.replace('_', '-')}",)), **{"help": f.help, **click})


def _option_name(f: _Field) -> str:
    """`--field-name`; a yes/no field is a switch pair (`--use-cpu/--no-use-cpu`), so a flag can also turn off what
    a recipe file or the default turned on."""
    name = f"--{f.name.replace('_', '-')}"
    return f"{name}/--no-{name[2:]}" if f.kind is bool and not f.many else name


def typer_options(cls: type, *, param: str = "config", exclude: tuple[str, ...] = (),
                  flags: Mapping[str, tuple[str, ...]] | None = None) -> Callable:
    """Decorate a typer command that takes `param: cls`: the command gets one option per field (help and default
    from the config; a list field is a repeatable option; a mapping field is YAML-only) and `--config FILE.yaml`; it
    is called with the built config, which holds only the values the file and the flags gave (the rest are the
    config's defaults: a pydantic model's `model_fields_set` tells which were given). `flags` names a field's option
    where it is not `--field-name` (e.g. `--allow-policy` for `policies`). Errors in values are the config's
    ConfigErrors, reported by the command like any other."""

    import typer

    flags = dict(flags or {})
    config_fields = [f for f in _fields(cls) if f.name not in exclude and f.kind is not dict]
    yaml_only = [f.name for f in _fields(cls) if f.kind is dict]
    unknown = sorted(set(flags) - {f.name for f in config_fields})
    if unknown:
        raise ValueError(f"flags for fields {cls.__name__} has no option for: {unknown}")

    def decorate(func: Callable) -> Callable:
        signature = inspect.signature(func)
        kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()
                if p.name != param]
        options = [inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY,
            annotation=types.GenericAlias(list, (f.kind,)) | None if f.many else f.kind | None,  # list[f.kind]
            default=typer.Option(None, *flags.get(f.name, (_option_name(f),)), show_default=False,
                                 hidden=f.research,
                                 help=f"{f.help} (default: {f.default}{'; repeat for each' if f.many else ''})"))
            for f in config_fields]
        renamed = {f"renamed_{name}": name for name in getattr(cls, "RENAMED", {})}
        # an earlier spelling stays a (hidden) option so that it is refused by build() with its new name
        old_options = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                                         default=typer.Option(None, f"--{name.replace('_', '-')}", hidden=True))
                       for key, name in renamed.items()]
        research = [f"--{f.name.replace('_', '-')}" for f in config_fields if f.research]
        config_file = inspect.Parameter(
            "config_file", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
            default=typer.Option(None, "--config", exists=True, dir_okay=False,
                                 help=f"YAML file of {cls.__name__} fields; flags given here override it."
                                 + (f" YAML only: {', '.join(yaml_only)}." if yaml_only else "")
                                 + (f" Research switches (off in the shipped recipe; options not listed here): "
                                    f"{', '.join(research)}." if research else "")))

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = {f.name: kwargs.pop(f.name) for f in config_fields}
            given.update({name: kwargs.pop(key) for key, name in renamed.items()})
            file = kwargs.pop("config_file")
            try:
                raw = _read_yaml(cls, file) if file else {}
                raw.update({k: v for k, v in given.items() if v is not None and v != [] and v != ()})
                config: object = build(cls, raw, source=str(file) if file else None)
            except ConfigError as exc:
                from rich.console import Console
                from rich.markup import escape

                Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}")
                raise typer.Exit(2) from None
            return func(**kwargs, **{param: config})

        command.__signature__ = signature.replace(parameters=[*kept, *options, *old_options, config_file])  # type: ignore[attr-defined]
        return command

    return decorate


@dataclasses.dataclass(frozen=True)
class SettingValue:
    """One setting as a run would take it: its value and where that came from (`default`, or the YAML file)."""

    name: str
    value: Any
    source: str
    help: str


def setting_values(cls: type, path: str | Path | None = None) -> list[SettingValue]:
    """Every field of `cls` with the value a run configured by `path` (a YAML file of its fields, checked as
    `--config` checks it; None: the defaults) would take, and its source."""
    raw = _read_yaml(cls, path) if path else {}
    config: object = build(cls, raw, source=str(path) if path else None)
    return [SettingValue(f.name, getattr(config, f.name), str(path) if f.name in raw else "default", f.help)
            for f in _fields(cls)]
