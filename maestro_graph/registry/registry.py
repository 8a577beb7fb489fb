"""The two-tier registry: model handles, skill specs, and the action space computed from capabilities."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from pathlib import Path

from PIL import Image

from ..cache.store import ExpertCache
from ..core.cancellation import current_cancel, run_abandonable
from ..digests import cache_key, file_digest
from ..errors import Cancelled, ConfigError, ExpertError, ExpertFailure, InputError, SkillError
from ..types import ErrorKind, Invoke, SkillResult, Step, Turn, pair_id
from .config import ModelCard, PythonBackend, RegistryConfig, load_config
from .context import SkillContext
from .handles import BoundExpert, ExpertHandle, Ledger
from .pair import Pair
from .profiles import PairCards, PairProfile, pair_fingerprints, read_profile
from .reach import Reach, reach_path
from .skills import SkillSpec, discover_skills
from .vision import ask, procedure_hash

_PASSING_FAILURES = frozenset({ExpertFailure.TIMEOUT, ExpertFailure.UNAVAILABLE, ExpertFailure.BREAKER_OPEN,
                               ExpertFailure.INJECTED})
"""Call failures that say nothing about the call's input: a step that met one is not cached, even when its skill
answered without that call (visual-math values an option it could not evaluate as unknown), because the next run
may not meet it. A crash on the input (an expression the calculator cannot read) is part of the outcome."""

__all__ = ["TEXT_READER", "CALCULATOR", "READ_THE_QUESTION", "Registry", "Pair"]

TEXT_READER = "ocr"
"""The tier-2 skill that reads every line of text in an image (skills/ocr): what reads a question written only in
the picture (`Registry.read_text`)."""
READ_THE_QUESTION = "read the question written in the image"
"""The input of that step, as traces show it."""
CALCULATOR = "calculator"
"""The tier-2 skill that evaluates an expression exactly (skills/calculator): what computes a follow-up about an
earlier answer (`Registry.calculate`)."""


def _check_entry(card: ModelCard, index: int, config: RegistryConfig) -> None:
    """A python entry whose module or class does not exist is a config error (a missing dependency is not). The
    module is imported by name, as every process that builds the registry (a Ray worker too) imports it: a module
    beside the registry file is importable once its folder is on PYTHONPATH, and the error says so."""
    if not isinstance(card.backend, PythonBackend):
        return
    module_name, _, attr = card.backend.entry.partition(":")
    field = f"models.{index}.backend.entry"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(f"no module {module_name!r} for model {card.name!r}: {_import_hint(module_name, config)}",
                              file=config.source, field=field) from exc
        return  # a dependency of the module is missing: reported as unavailable
    if not hasattr(module, attr):
        raise ConfigError(f"module {module_name!r} has no class {attr!r} (model {card.name!r})", file=config.source,
                          field=field)


def _import_hint(module_name: str, config: RegistryConfig) -> str:
    """How to make a python expert's module importable: its folder on PYTHONPATH (named, when the module lies
    beside the registry file), or an installed package."""
    relative = Path(*module_name.split("."))
    folder = config.base_dir.resolve()
    if (folder / relative.with_suffix(".py")).is_file() or (folder / relative / "__init__.py").is_file():
        return (f"{relative.with_suffix('.py')} lies beside the registry file, but a python expert's module is "
                f"imported by name: put its folder on PYTHONPATH (PYTHONPATH={folder}) or install it as a package")
    return ("a python expert's module is imported by name: install the package that holds it, or put the folder "
            "that holds it on PYTHONPATH")


class Registry:
    """Models and skills of one config. Building it is cheap: no model loads until a call needs it."""

    def __init__(self, config: RegistryConfig, skills: dict[str, SkillSpec], *, cache: ExpertCache | None = None):
        self.config = config
        self.cache = cache
        self.models: dict[str, ExpertHandle] = {card.name: ExpertHandle(card, cache) for card in config.models}
        self.skills = skills
        self.descriptions: dict[str, str] = {}
        """Card texts that replace a model's or skill's description in the action space (training's paraphrases)."""
        self.profiles: dict[str, PairProfile] = {}
        """The profiled pairs (by pair id) of the config's `profile` file, those that fit this registry."""
        self.reach: Reach | None = None
        """Which pair answered which of the profile's calibration items (registry.reach), for the pairs it measured
        as they are now; None: unknown."""

    @classmethod
    def load(cls, path: str | Path | None = None, *, cache: ExpertCache | None = None,
             profiled: bool = True) -> Registry:
        """The registry a config file describes; `profiled=False` leaves its `profile:` file unread (what
        `maestro registry profile` needs: the file it is about to write may not exist yet)."""
        config = load_config(path)
        for index, card in enumerate(config.models):
            _check_entry(card, index, config)
        skills = discover_skills(config.skill_paths())
        if config.skills is not None:
            unknown = sorted(set(config.skills) - set(skills))
            if unknown:
                raise ConfigError(
                    f"unknown skills {unknown}; skills found: {sorted(skills)}", file=config.source, field="skills"
                )
            skills = {name: spec for name, spec in skills.items() if name in config.skills}
        registry = cls(config, skills, cache=cache)
        profile = config.profile_to_read()
        return registry._profiled(profile) if profiled and profile is not None else registry

    def _profiled(self, profile: str | Path) -> Registry:
        """This registry reading the profile file at `profile` and the reach beside it (their fitting parts)."""
        cards = self.pair_cards()
        self.profiles = read_profile(profile, cards)
        available = set(self.pair_ids())
        current = {pair: fp for pair, fp in pair_fingerprints(cards).items() if pair in available}
        self.reach = Reach.read(reach_path(profile), current)
        return self

    def without(self, *, models: AbstractSet[str] = frozenset(), skills: AbstractSet[str] = frozenset(),
                descriptions: dict[str, str] | None = None, unprofiled: AbstractSet[str] = frozenset()) -> Registry:
        """A view of this registry with some models and skills left out, some card texts replaced (by model or
        skill name) and some pairs' profiles hidden (by pair id), sharing the loaded experts and skill code
        (training's registry dropout, card paraphrases and profile dropout, and experiments that add an expert after
        training). Policies read the replaced texts and profiles through `pairs()`; nothing else changes."""
        view = Registry.__new__(Registry)
        view.config = self.config
        view.cache = self.cache
        view.models = {name: h for name, h in self.models.items() if name not in models}
        view.skills = {name: s for name, s in self.skills.items() if name not in skills}
        view.descriptions = {**self.descriptions, **(descriptions or {})}
        view.profiles = {pair: entry for pair, entry in self.profiles.items() if pair not in unprofiled}
        view.reach = self.reach  # the graph asks it about the view's own pairs
        return view

    def with_profile(self, path: str | Path) -> Registry:
        """A view of this registry whose pairs read the profile file at `path` (its fitting entries, as the
        config's `profile:` key reads one) and the reach beside it instead of the config's: experiments that
        profile a registry on their own calibration items."""
        return self.without()._profiled(path)

    # -- the action space ---------------------------------------------------------------------------------------
    def available(self, model: str) -> bool:
        handle = self.models.get(model)
        return handle is not None and handle.unavailable_reason() is None

    @property
    def tier1(self) -> list[SkillSpec]:
        return [s for s in self.skills.values() if s.tier == 1]

    def compatible(self, card: ModelCard, skill: SkillSpec) -> bool:
        """Whether the card's model can carry the skill out: it has what the skill's code requires, or what its
        `or-requires` names (a vision-chat model, which runs the skill by its instructions: registry.vision)."""
        return skill.runs_with(card.capabilities)

    def pairs(self) -> list[Pair]:
        """Every available (model, tier-1 skill) whose model has all the capabilities the skill requires; a model
        whose circuit breaker is open is unavailable for now."""
        texts = self.descriptions
        skills = [replace(s, description=texts[s.name]) if s.name in texts else s for s in self.tier1]
        cards = [h.card.model_copy(update={"description": texts[h.name]}) if h.name in texts else h.card
                 for h in self.models.values() if h.live_unavailable_reason() is None]
        return [Pair(card, skill, self.profiles.get(pair_id(card.name, skill.name)))
                for skill in skills for card in cards if self.compatible(card, skill)]

    def pair_cards(self) -> PairCards:
        """(card, skill) of every compatible pair by id, available now or not, with the cards as configured: what
        a profile's fingerprints are checked against."""
        return {pair_id(h.name, s.name): (h.card, s) for s in self.tier1 for h in self.models.values()
                if self.compatible(h.card, s)}

    def pair_ids(self) -> list[str]:
        return [p.id for p in self.pairs()]

    def invalid_reason(self, action: Invoke) -> str | None:
        """Why an Invoke is not a valid action, phrased for the policy, or None when it is valid."""
        valid = self.pair_ids()
        hint = f"valid pairs: {valid}"
        model = self.models.get(action.model)
        skill = self.skills.get(action.skill)
        if model is None:
            return f"unknown model {action.model!r}; {hint}"
        if skill is None or skill.tier != 1:
            return f"unknown skill {action.skill!r}; {hint}"
        if not self.compatible(model.card, skill):
            lacks = skill.lacking(model.card.capabilities)
            return f"{action.pair} is not a valid pair: {action.model} lacks {lacks}; {hint}"
        reason = model.live_unavailable_reason()
        if reason:
            return f"model {action.model!r} is unavailable ({reason}); {hint}"
        return None

    def skill_unavailable_reason(self, skill: SkillSpec) -> str | None:
        """Why no model of this registry can run `skill` here, with each card's install hint, or None when one
        can: a skill whose only model is not installed is listed as unavailable, and how to add it, instead of
        quietly having no pair."""
        compatible = [h for h in self.models.values() if self.compatible(h.card, skill)]
        if not compatible:
            return (f"no model of this registry has the capabilities it requires {sorted(skill.requires)}"
                    + (f" (or {sorted(skill.or_requires)})" if skill.or_requires else ""))
        reasons = {h.name: h.unavailable_reason() for h in compatible}
        if None in reasons.values():
            return None
        return "; ".join(f"model {h.name!r} is unavailable: {reasons[h.name]}"
                         + (f"; to add it: {h.card.install}" if h.card.install else "") for h in compatible)

    # -- helpers for skill code ------------------------------------------------------------------------------------
    def model_with(self, capability: str) -> ExpertHandle | None:
        return next((h for h in self.models.values()
                     if capability in h.card.capabilities and h.live_unavailable_reason() is None), None)

    def model_for(self, skill: SkillSpec) -> ExpertHandle | None:
        """The first available model that can run `skill`. When every such model is down, the first of them: its
        handle refuses the call (breaker open, not installed) into the step's ledger, so a step that went on without
        it is never cached as complete. None when no model can run it."""
        compatible = [h for h in self.models.values() if self.compatible(h.card, skill)]
        return next((h for h in compatible if h.live_unavailable_reason() is None),
                    compatible[0] if compatible else None)

    def ask_by_instructions(self, ctx: SkillContext, images: Sequence[Image.Image] | None = None) -> SkillResult:
        """`SkillContext.ask`: the vision-chat procedure (registry.vision), which reads the context, so the context
        reaches it through here."""
        return ask(ctx, images)

    # -- running a step ------------------------------------------------------------------------------------------------
    def run(self, action: Invoke, *, question: str, images: list[str], choices: list[str] | None = None,
            history: list[Turn] | None = None) -> Step:
        """Execute one action and return its Step. Every failure is recorded with whose fault it was; the one
        exception is `Cancelled` (the episode's caller is gone), which is raised so that no step is committed.
        `history` is the conversation the question continues (SkillContext.history)."""
        start = time.perf_counter()
        step = Step(model=action.model, skill=action.skill, input=action.input)
        reason = self.invalid_reason(action)
        if reason:
            step.error, step.error_kind = reason, ErrorKind.POLICY
            return step
        key = self._step_key(action, question, images, choices, history or [])
        if key is not None:
            assert self.cache is not None  # a step has a key only with a cache (`_step_key`)
            hit, cached = self.cache.get(key)
            if hit:
                return cached.model_copy(update={"latency_s": time.perf_counter() - start, "cached": True})
        ledger = Ledger(cancel=current_cancel())
        ctx = SkillContext(
            registry=self,
            skill=self.skills[action.skill],
            model=BoundExpert(self.models[action.model], ledger),
            question=question,
            image_refs=list(images),
            choices=list(choices) if choices else None,
            input=action.input,
            ledger=ledger,
            history=list(history or []),
        )
        # a model that carries the skill out by its instructions is asked (registry.vision); the skill's code is not
        entry = ask if ctx.skill.by_instructions(ctx.model.card.capabilities) else ctx.skill.run
        return self._record(step, ctx, entry, start, key)

    def read_text(self, images: list[str]) -> Step:
        """The text written in the first image, as a step of the episode: the tier-2 `TEXT_READER` skill run with the
        first model that can run it (`evidence`: the lines in reading order; no candidate answer). How a blank
        question sent with an image is read (the whole question is in the picture); a failure is recorded like any
        step's, and a registry without the skill or a model for it says so in the step's error."""
        return self._tier2_step(TEXT_READER, READ_THE_QUESTION, images[:1], "so no text can be read from the image",
                                lambda spec, c: SkillResult(evidence=spec.run(c).text, confidence=0.0))

    def calculate(self, expression: str) -> Step:
        """The value of an arithmetic expression or comparison, as a step of the episode: the tier-2 `CALCULATOR`
        skill (exact) run with the first model that can run it (`answer`: the value as the calculator writes it,
        `True`/`False` for a comparison). How a follow-up about an earlier answer is computed from the conversation
        (episode.followups); a failure is recorded like any step's."""
        def value(spec: SkillSpec, ctx: SkillContext) -> SkillResult:
            said = str(spec.run(ctx, expression=expression))
            return SkillResult(answer=said, evidence=f"{expression} = {said}", confidence=1.0)

        return self._tier2_step(CALCULATOR, expression, [], "so nothing can be computed", value)

    def _tier2_step(self, name: str, request: str, images: list[str], missing: str,
                    entry: Callable[[SkillSpec, SkillContext], SkillResult]) -> Step:
        """A tier-2 skill run by the graph itself (not by a tier-1 skill) as a step of the episode."""
        start = time.perf_counter()
        spec = self.skills.get(name)
        handle = self.model_for(spec) if spec is not None else None
        if spec is None or handle is None:
            return Step(model="", skill=name, input=request, error_kind=ErrorKind.EXPERT,
                        error=f"no model of this registry runs the {name!r} skill, {missing}")
        ledger = Ledger(cancel=current_cancel())
        ctx = SkillContext(registry=self, skill=spec, model=BoundExpert(handle, ledger), question="",
                           image_refs=list(images), input=request, ledger=ledger)
        step = Step(model=handle.card.name, skill=name, input=request)
        return self._record(step, ctx, lambda c: entry(spec, c), start, None)

    def _record(self, step: Step, ctx: SkillContext, entry: Callable[[SkillContext], SkillResult], start: float,
                key: str | None) -> Step:
        """Run `entry(ctx)` within the skill time limit and record its result, or its failure with whose fault it
        was, in `step` (cached under `key` when complete)."""
        ledger = ctx.ledger
        try:
            result = run_abandonable(entry, ctx, timeout_s=self.config.skill_timeout_s, cancel=ledger.cancel)
            if not isinstance(result, SkillResult):
                raise SkillError(
                    f"skill {step.skill!r} returned {type(result).__name__}; a tier-1 skill returns SkillResult"
                )
            step.evidence = result.evidence
            step.answer = None if result.answer is None else str(result.answer).strip() or None
            step.confidence = float(result.confidence)
        except Cancelled:
            raise  # abandoned, not failed: no step is recorded, so a resumed episode runs this one again
        except InputError as exc:
            step.error, step.error_kind = str(exc), ErrorKind.INPUT
        except ExpertError as exc:
            step.error, step.error_kind = str(exc), ErrorKind.EXPERT
        except FutureTimeout:
            step.error, step.error_kind = (
                f"skill {step.skill!r} did not finish within {self.config.skill_timeout_s:g}s (skill_timeout_s)",
                ErrorKind.SKILL,
            )
        except (OSError, MemoryError) as exc:  # the node's disk, memory or files, not the skill's logic
            step.error, step.error_kind = (f"skill {step.skill!r} failed on this node: {exc.__class__.__name__}: "
                                           f"{exc}", ErrorKind.NODE)
        except Exception as exc:  # skill code is a plug-in: contain it and record the crash (an episode boundary)
            step.error, step.error_kind = (f"skill {step.skill!r} crashed: {exc.__class__.__name__}: {exc}",
                                           ErrorKind.SKILL)
        step.cost = ledger.cost
        step.calls = [c.__dict__ for c in list(ledger.calls)]
        step.latency_s = time.perf_counter() - start
        if key is not None and step.error is None and all(
                self.models[c.model].card.cacheable and c.failure not in _PASSING_FAILURES for c in ledger.calls):
            assert self.cache is not None  # a step has a key only with a cache (`_step_key`)
            self.cache.put(key, step)
        return step

    def _step_key(self, action: Invoke, question: str, images: list[str], choices: list[str] | None,
                  history: list[Turn]) -> str | None:
        """The step cache's key; the conversation counts only when there is one (a follow-up's answer depends on
        it), so the keys of standalone questions stay those already cached."""
        card = self.models[action.model].card
        if self.cache is None or not card.cacheable:
            return None
        skill = self.skills[action.skill]
        parts = ["step", card.name, card.version, skill.name, procedure_hash(card, skill), action.input, question,
                 list(choices or []), [file_digest(ref) for ref in images]]
        return cache_key(*parts, [[t["question"], t["answer"]] for t in history]) if history else cache_key(*parts)

    def describe(self) -> dict:
        """Models (with availability), skills and pairs, for `maestro registry show`."""
        return {
            "config": self.config.source,
            "models": [
                {
                    "name": h.name,
                    "capabilities": h.card.capabilities,
                    "backend": h.card.backend.type,
                    "cost_per_call": h.card.cost.per_call,
                    "available": h.unavailable_reason() is None,
                    "reason": h.unavailable_reason(),
                    "install": h.card.install,
                }
                for h in self.models.values()
            ],
            "skills": [
                {"name": s.name, "tier": s.tier, "requires": list(s.requires), "or_requires": list(s.or_requires),
                 "description": s.description,
                 "available": (reason := self.skill_unavailable_reason(s)) is None, "reason": reason}
                for s in self.skills.values()
            ],
            "pairs": self.pair_ids(),
        }
