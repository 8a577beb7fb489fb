"""Skill folders in the Agent Skills format, discovered by scanning directories.

Loading is progressive: the front matter (name, description, metadata) is read and validated at start-up; the body
and the code are read on first use. Our own keys live under `metadata:` (strings only, as the spec says):

    metadata:
      tier: "1"                      # 1 = the policy chooses it, 2 = building block for skill code
      requires: "ocr"                # capabilities the model must have (comma-separated, all required)
      or-requires: "vision-chat"     # optional: or a vision-chat model carries the skill out (see below)
      entry: "skill.py:run"          # file inside the folder, and the function to call
      keywords: "chart, bar, plot"   # optional, read by the keyword-rules policy
      declines: "declines"           # optional: a function of the entry file, (request, choices) -> reason | None
      images: "optional"             # optional: "required" (the default) or "optional" (see below)

A skill whose answer hinges on what the question asks (a count, a sum, a code) can say from the question alone that
it has nothing to answer with; `declines` says so before any model runs, the action space leaves such pairs out
(invalid-action masking: no turn is spent on a call bound to return nothing), and the skill's entry declines through
the same function, so the two never disagree.

One skill, several kinds of model: `requires` names what the skill's own code calls (its CPU tools); `or-requires:
"vision-chat"` says that a vision-language model can carry the same skill out instead. A pair whose model has
`vision-chat` and whose skill says so runs the one shared procedure of `maestro_graph.registry.vision` (the SKILL.md
body as the model's instructions, the question, options and images sent, the reply parsed into the answer's form),
never the skill's code; `vision-chat` is the only alternative that has such a procedure. The `or-requires` line is
left out of the hash of the skill's code (`code_hash`): the pairs that run the skill's code do not depend on it, so
declaring the alternative keeps their profiles and cached steps valid. The value is therefore one line.

What a skill reads: a skill looks at the request's images unless it says `images: "optional"` (it answers from the
text alone when there is none: a word problem, a general question). Without an image the action space leaves out
every pair of a skill that requires one (invalid-action masking again: the call could only fail on its input), so a
text question reaches the text skills first. Like `or-requires`, the `images` line says when the skill is offered,
not what its code does: it is left out of `code_hash` too, and is written on one line.

Skill code is trusted: it is imported and run in-process with the process's rights, with no sandbox, like an
installed package. Only the operator adds skill folders; nothing a client sends names one. Still, a broken or
hostile SKILL.md must not hang start-up: a SKILL.md above `MAX_SKILL_MD_BYTES` is refused before it is read, the
front matter is at most `MAX_FRONT_MATTER` characters and is read by the one reader of operator YAML
(`core.operator_yaml`: aliases refused, since a "billion laughs" bomb expands a few hundred bytes into gigabytes;
nesting capped), and a value quoted in an error message is cut to `_SHOWN` characters.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.operator_yaml import parse_yaml, read_bounded_text
from ..errors import SkillError

__all__ = ["SkillSpec", "load_skill", "discover_skills", "MAX_NAME", "MAX_DESCRIPTION", "MAX_FRONT_MATTER",
           "MAX_SKILL_MD_BYTES",
           "ALTERNATIVES", "IMAGE_NEEDS"]

MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_FRONT_MATTER = 16_384
"""The longest front matter read, in characters (the packaged skills' are under 1,000)."""
MAX_SKILL_MD_BYTES = 1_000_000
"""The largest SKILL.md read, in bytes, refused by its size before it is read (the packaged ones are under 10 KB;
the body is a chat model's instructions)."""
_SHOWN = 80
"""The most characters of a bad value that an error message quotes."""
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_ALLOWED_TOP = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
_SKILLS_PACKAGE = "maestro_skills"
_FRONT_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)(.*)\Z", re.S)
ALTERNATIVES = frozenset({"vision-chat"})
"""Capabilities `or-requires` may name: those with a shared procedure that carries any skill out from its SKILL.md
(registry.vision)."""
IMAGE_NEEDS = ("required", "optional")
"""Values of `metadata.images`: whether the skill needs an image (the default) or answers from the text alone."""
_OFFER_KEYS = ("or-requires", "images")
"""Metadata keys that say when a skill is offered, not what its code does: their lines are left out of its hash."""
_OFFER_LINE = re.compile(rb"^[ \t]+(?:" + b"|".join(k.encode() for k in _OFFER_KEYS) + rb"):[^\n]*\n", re.M)
"""A line of a SKILL.md's front matter holding one of `_OFFER_KEYS`."""


def _split_csv(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def _shown(value: object) -> str:
    """`repr(value)` cut to `_SHOWN` characters, for error messages (a front-matter value may be huge)."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text):,} characters)"


def _read_front(text: str, skill_md: Path) -> Any:
    """A front matter's YAML, read as data only by the one reader of operator YAML (`core.operator_yaml`: the safe
    loader, nesting capped, and no aliases: a front matter has no use for them): a SkillError naming the file
    otherwise."""
    return parse_yaml(text, file=str(skill_md), error=SkillError, aliases=False)


def _read_skill_md(skill_md: Path) -> str:
    return read_bounded_text(skill_md, limit=MAX_SKILL_MD_BYTES, limit_name="MAX_SKILL_MD_BYTES", error=SkillError)


@dataclass
class SkillSpec:
    """A validated skill folder. `run` and `instructions` load lazily."""

    name: str
    description: str
    tier: int
    requires: tuple[str, ...]
    entry_file: str
    entry_func: str
    folder: Path
    keywords: tuple[str, ...] = ()
    version: str = "1"
    declines_func: str | None = None
    """The entry file's function that says, from the request's text alone, why the skill has nothing to answer."""
    or_requires: tuple[str, ...] = ()
    """Capabilities with which a model carries the skill out by its instructions instead of its code (`vision-chat`);
    empty: only `requires`."""
    needs_image: bool = True
    """Whether a call without an image can only fail (`metadata.images`, default "required"): the action space leaves
    such pairs out of a request without one."""
    _body: str | None = field(default=None, repr=False)
    _module: types.ModuleType | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @cached_property
    def code_hash(self) -> str:
        """Hash of every file in the folder: a cached step is invalid once the skill's code or prompt changes. The
        `or-requires` and `images` lines are left out: they change which models can carry the skill out and which
        requests it is offered for, not what its code does."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(self.folder)).encode())
            data = path.read_bytes()
            if path == self.skill_md:
                data = _without_offer_lines(data)
            digest.update(data)
        return digest.hexdigest()[:16]

    def runs_with(self, capabilities: Sequence[str]) -> bool:
        """Whether a model with these capabilities can carry the skill out: by its code or by its instructions."""
        return set(self.requires) <= set(capabilities) or self.by_instructions(capabilities)

    def by_instructions(self, capabilities: Sequence[str]) -> bool:
        """Whether a model with these capabilities carries the skill out by its instructions (`or-requires`), which
        wins over the skill's code when the model has both: such a model is asked, not driven as a tool."""
        return bool(self.or_requires) and set(self.or_requires) <= set(capabilities)

    def lacking(self, capabilities: Sequence[str]) -> str:
        """What a model with these capabilities lacks for this skill, phrased for an error message."""
        missing = sorted(set(self.requires) - set(capabilities))
        return f"{missing}" + (f" (or {sorted(set(self.or_requires) - set(capabilities))})" if self.or_requires
                               else "")

    @property
    def skill_md(self) -> Path:
        return self.folder / "SKILL.md"

    @property
    def instructions(self) -> str:
        """The SKILL.md body: the prompt used when the skill runs on a chat model."""
        if self._body is None:
            match = _FRONT_RE.match(_read_skill_md(self.skill_md))
            self._body = match.group(2).strip() if match else ""
        return self._body

    @property
    def run(self) -> Callable[..., Any]:
        """The entry function, imported from the folder's file on first use."""
        return self._function(self.entry_func, "entry")

    def declines(self, request: str, choices: Sequence[str] | None) -> str | None:
        """Why this skill has nothing to answer `request` with, read from its text (and choices) alone; None when it
        may answer, when it has no `declines` function, and when that check fails (with a warning naming the skill:
        a broken check must not hide a skill that works)."""
        if self.declines_func is None:
            return None
        try:
            reason = self._function(self.declines_func, "declines")(request, list(choices) if choices else None)
        except Exception as exc:  # skill code is third-party: it may fail, the episode goes on
            warnings.warn(f"skill {self.name!r}: {self.declines_func}() failed ({exc.__class__.__name__}: {exc}); "
                          "the skill stays callable", stacklevel=2)
            return None
        return str(reason) if reason else None

    def _function(self, name: str, key: str) -> Callable[..., Any]:
        """A function of the entry file, which is imported on first use."""
        with self._lock:
            if self._module is None:
                self._module = self._import()
        func = getattr(self._module, name, None)
        if not callable(func):
            raise SkillError(
                f"{self.folder / self.entry_file} has no function {name!r}; "
                + (f"a skill entry is `def {name}(ctx, ...)`" if key == "entry"
                   else f"a `declines` function is `def {name}(request, choices) -> str | None`"),
                file=str(self.skill_md),
                field=f"metadata.{key}",
            )
        return func

    def _import(self) -> types.ModuleType:
        """Import the entry file as a module of a package made of the skill folder, so skill code can split itself
        into modules and use relative imports (`from .parse import table`)."""
        path = self.folder / self.entry_file
        package = f"{_SKILLS_PACKAGE}.{self.name.replace('-', '_')}"
        if _SKILLS_PACKAGE not in sys.modules:
            root = types.ModuleType(_SKILLS_PACKAGE)
            root.__path__ = []
            sys.modules[_SKILLS_PACKAGE] = root
        folder_pkg = types.ModuleType(package)
        folder_pkg.__path__ = [str(self.folder)]
        sys.modules[package] = folder_pkg
        module_name = f"{package}.{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise SkillError(f"cannot import {path}", file=str(self.skill_md), field="metadata.entry")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look classes up by module name
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # skill code is third-party: report whose fault it was
            sys.modules.pop(module_name, None)
            raise SkillError(
                f"importing {path} failed: {exc.__class__.__name__}: {exc}",
                file=str(self.skill_md),
                field="metadata.entry",
            ) from exc
        return module


def _without_offer_lines(skill_md: bytes) -> bytes:
    """A SKILL.md without the `_OFFER_KEYS` lines of its front matter (the body is left as it is)."""
    match = re.match(rb"\A---\s*\n(.*?\n)---", skill_md, re.S)
    if match is None:
        return skill_md
    return skill_md[:match.start(1)] + _OFFER_LINE.sub(b"", match.group(1)) + skill_md[match.end(1):]


def _problems(folder: Path, front: dict) -> list[tuple[str, str]]:
    """Every problem at once, as (field, message)."""
    problems: list[tuple[str, str]] = []
    unknown = sorted(set(front) - _ALLOWED_TOP)
    if unknown:
        problems.append((unknown[0], f"unknown top-level keys {unknown}; put our own keys under `metadata:`"))
    name = front.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > MAX_NAME:
        problems.append(("name", f"must be lowercase letters, digits and hyphens, at most {MAX_NAME}; "
                                 f"got {_shown(name)}"))
    elif name != folder.name:
        problems.append(("name", f"must equal the folder name {folder.name!r}; got {_shown(name)}"))
    desc = front.get("description")
    if not isinstance(desc, str) or not desc.strip() or len(desc) > MAX_DESCRIPTION:
        problems.append(("description", f"must be a non-empty string of at most {MAX_DESCRIPTION} characters"))
    meta = front.get("metadata")
    if not isinstance(meta, dict):
        problems.append(("metadata", "must be a mapping with tier, requires and entry"))
        return problems
    for key, value in meta.items():
        if not isinstance(value, str):
            problems.append((f"metadata.{_shown(key)}", f"metadata values must be strings; got {_shown(value)}"))
    if str(meta.get("tier")) not in {"1", "2"}:
        problems.append(("metadata.tier", f"must be \"1\" or \"2\"; got {_shown(meta.get('tier'))}"))
    if not _split_csv(str(meta.get("requires", ""))):
        problems.append(("metadata.requires", "must name at least one capability, e.g. \"ocr\""))
    entry = str(meta.get("entry", ""))
    file_part, sep, func = entry.partition(":")
    if not sep or not file_part or not func.isidentifier():
        problems.append(("metadata.entry", f"must be `file.py:function`; got {_shown(entry)}"))
    elif not (folder / file_part).resolve().is_relative_to(folder.resolve()):
        problems.append(("metadata.entry", f"file {file_part!r} is outside the skill folder {folder}; skill code "
                                           "loads only from its own folder"))
    elif not (folder / file_part).is_file():
        problems.append(("metadata.entry", f"file {file_part!r} does not exist in {folder}"))
    declines = meta.get("declines")
    if declines is not None and not str(declines).isidentifier():
        problems.append(("metadata.declines", f"must name a function of the entry file; got {_shown(declines)}"))
    alternative = meta.get("or-requires")
    if alternative is not None and (not _split_csv(str(alternative))
                                    or not set(_split_csv(str(alternative))) <= ALTERNATIVES):
        problems.append(("metadata.or-requires", f"must be one of {sorted(ALTERNATIVES)} (the capabilities with a "
                                                 f"shared procedure); got {_shown(alternative)}"))
    images = meta.get("images")
    if images is not None and images not in IMAGE_NEEDS:
        problems.append(("metadata.images", f"must be one of {list(IMAGE_NEEDS)} (whether the skill needs an image); "
                                            f"got {_shown(images)}"))
    return problems


def _one_line_offers(front_text: str, front: dict) -> bool:
    """Whether each of `_OFFER_KEYS` is written on one line, as the code hash (which leaves those lines out)
    needs: the front matter without the lines reads as the front matter without the keys."""
    stripped = _OFFER_LINE.sub(b"", (front_text + "\n").encode()).decode()
    try:
        rest = _read_front(stripped, Path("SKILL.md"))
    except SkillError:
        return False
    expected = {**front, "metadata": {k: v for k, v in front["metadata"].items() if k not in _OFFER_KEYS}}
    return rest == expected


def load_skill(folder: str | Path) -> SkillSpec:
    """Read and validate one skill folder's front matter; code and body load on first use."""
    folder = Path(folder)
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        raise SkillError("missing SKILL.md", file=str(skill_md))
    text = _read_skill_md(skill_md)
    match = _FRONT_RE.match(text)
    if not match:
        raise SkillError("SKILL.md must start with YAML front matter between `---` lines", file=str(skill_md))
    if len(match.group(1)) > MAX_FRONT_MATTER:
        raise SkillError(f"the front matter has {len(match.group(1)):,} characters, above the cap of "
                         f"{MAX_FRONT_MATTER:,}; keep long text in the body", file=str(skill_md))
    front = _read_front(match.group(1), skill_md)
    if not isinstance(front, dict):
        raise SkillError("front matter must be a mapping", file=str(skill_md))
    problems = _problems(folder, front)
    if problems:
        raise SkillError(
            "; ".join(f"{f}: {m}" for f, m in problems), file=str(skill_md), field=", ".join(f for f, _ in problems)
        )
    meta = front["metadata"]
    offered = [k for k in _OFFER_KEYS if k in meta]
    if offered and not _one_line_offers(match.group(1), front):
        raise SkillError(f"write each of {offered} on one line of its own under `metadata:` (e.g. "
                         "`or-requires: \"vision-chat\"`)", file=str(skill_md), field=f"metadata.{offered[0]}")
    file_part, _, func = meta["entry"].partition(":")
    return SkillSpec(
        name=front["name"],
        description=front["description"].strip(),
        tier=int(meta["tier"]),
        requires=_split_csv(meta["requires"]),
        entry_file=file_part,
        entry_func=func,
        folder=folder.resolve(),
        keywords=_split_csv(meta.get("keywords", "")),
        version=str(meta.get("version", "1")),
        declines_func=meta.get("declines"),
        or_requires=_split_csv(meta.get("or-requires", "")),
        needs_image=meta.get("images", "required") == "required",
    )


def discover_skills(dirs: list[Path]) -> dict[str, SkillSpec]:
    """Every skill folder (a folder holding SKILL.md) directly under the given directories."""
    skills: dict[str, SkillSpec] = {}
    for base in dirs:
        if not base.is_dir():
            raise SkillError(f"skill directory {base} does not exist", field="skill_dirs")
        for folder in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            if not folder.resolve().is_relative_to(base.resolve()):
                raise SkillError(f"skill folder {folder} links to {folder.resolve()}, outside the skill directory "
                                 f"{base}; skills load only from the configured skill_dirs", field="skill_dirs")
            spec = load_skill(folder)
            if spec.name in skills:
                raise SkillError(
                    f"skill {spec.name!r} is defined twice ({skills[spec.name].folder} and {folder})",
                    file=str(spec.skill_md),
                    field="name",
                )
            skills[spec.name] = spec
    return skills
