"""What skill code receives: the request, the images, the pair's model, and access to tier-2 skills and experts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from PIL import Image

from ..errors import ExpertUnavailable, InputError, SkillError
from ..images.load import load_images
from ..types import SkillResult, Turn
from .handles import BoundExpert, ExpertHandle, Ledger
from .skills import SkillSpec

__all__ = ["Experts", "SkillContext"]


class Experts(Protocol):
    """What a skill's context asks of the registry (registry.Registry is one): the skills by name, and a model for a
    capability or for a tier-2 skill. Named here so that the context, which the registry builds, does not depend on
    the registry."""

    @property
    def skills(self) -> Mapping[str, SkillSpec]: ...

    def model_with(self, capability: str) -> ExpertHandle | None: ...

    def model_for(self, skill: SkillSpec) -> ExpertHandle | None: ...

    def ask_by_instructions(self, ctx: SkillContext, images: Sequence[Image.Image] | None = None) -> SkillResult: ...


@dataclass
class SkillContext:
    """Per-call context. Skill code reads `question`, `input`, `images`, `choices`, `history`, `instructions`, calls
    `model.<method>(...)`, `expert(capability)`, `use(tier2_skill, ...)` and, on a vision-chat model, `ask()`."""

    registry: Experts
    skill: SkillSpec
    model: BoundExpert
    question: str
    image_refs: list[str]
    choices: list[str] | None = None
    input: str = ""
    ledger: Ledger = field(default_factory=Ledger)
    history: list[Turn] = field(default_factory=list)
    """The conversation before this question (oldest first): what a follow-up such as "How many letters does it
    have?" refers to."""

    @property
    def instructions(self) -> str:
        return self.skill.instructions

    @property
    def request(self) -> str:
        """The policy's input text when it gave one, else the question."""
        return self.input.strip() or self.question

    @cached_property
    def images(self) -> list[Image.Image]:
        """The episode's images, loaded on first access; a bad image raises InputError naming it."""
        if not self.image_refs:
            raise InputError(f"skill {self.skill.name!r} needs an image and the request has none")
        return load_images(self.image_refs)  # decoded within the request's pixel budget

    @property
    def image(self) -> Image.Image:
        return self.images[0]

    def expert(self, capability: str) -> BoundExpert:
        """The pair's model when it has `capability`, else the first available registry model that has it."""
        if self.model.has(capability):
            return self.model
        handle = self.registry.model_with(capability)
        if handle is None:
            raise ExpertUnavailable(f"no available model has capability {capability!r}")
        return BoundExpert(handle, self.ledger)

    def ask(self, images: Sequence[Image.Image] | None = None) -> SkillResult:
        """The skill carried out by the pair's vision-chat model from its instructions: the procedure a skill that
        says `or-requires: "vision-chat"` runs (registry.vision.ask), for a skill of its own for such models
        (visual-qa); `images` (default: the request's) are the crops or zooms the skill's steps chose."""
        return self.registry.ask_by_instructions(self, images)

    def use(self, skill_name: str, **kwargs: Any) -> Any:
        """Run a tier-2 skill with the best model for it (the pair's model when compatible)."""
        spec = self.registry.skills.get(skill_name)
        if spec is None:
            raise SkillError(f"skill {self.skill.name!r} asked for unknown tier-2 skill {skill_name!r}")
        if self.model.has_all(spec.requires):
            model = self.model
        else:
            handle = self.registry.model_for(spec)
            if handle is None:
                raise ExpertUnavailable(f"no model can run tier-2 skill {skill_name!r} (needs {spec.requires})")
            model = BoundExpert(handle, self.ledger)
        sub = SkillContext(
            registry=self.registry,
            skill=spec,
            model=model,
            question=self.question,
            image_refs=self.image_refs,
            choices=self.choices,
            input=self.input,
            ledger=self.ledger,
            history=self.history,
        )
        if "images" in self.__dict__:
            sub.__dict__["images"] = self.__dict__["images"]
        return spec.run(sub, **kwargs)
