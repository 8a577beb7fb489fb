"""The routing figures recorded beside a registry's profile, and the check that a policy still earns them.

A change to a skill, a profile or a checkpoint can move routing without any test of one behaviour noticing: a skill's
code change leaves its pairs' profile entries stale (read as unknown), a profile measured again moves what the policy
reads, and the shipped router once sent hard chart questions to the chat model while every identity check passed. So
each shipped registry's profile has a record beside it (`<profile stem>.routing.json`) of a fixed, stratified sample of
real items: the learned policy's first call on each item (computed without running any expert but the text reader of a
blank question, so it is checked on every test run), each policy's accuracy (checked by a slow test that runs the
episodes), tolerances, and a note for every change saying why. The checks fail when the first calls differ on more items
than allowed, when the learned policy falls below the rule baseline, or when a policy's accuracy moves from its record
by more than the tolerance either way (a gain is recorded with its reason too, so the next loss is measured from it).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...core.configs import DEFAULT_MAX_COST, DEFAULT_MAX_TURNS
from ...core.question_text import is_blank
from ...core.tasks import Task
from ...episode.intake import read_question
from ...episode.written_question import routed_images
from ...policy import ActionSpace, EpisodeView, make_policy
from ...registry import Registry
from ...types import Invoke, Step

__all__ = ["LEARNED", "BASELINE", "INPUT_ERROR", "RoutingNote", "RoutingRecord", "first_calls", "routing_record_path"]

LEARNED = "neural"
"""The policy whose figure is guarded."""
BASELINE = "rules"
"""The policy it must stay at or above."""
INPUT_ERROR = "input error"
"""The first call of an item whose blank question reads, off its image, as no question: the episode ends at intake."""


def routing_record_path(profile: str | Path) -> Path:
    """Where a profile's routing record lives: `x.profile.json` -> `x.profile.routing.json`."""
    profile = Path(profile)
    return profile.with_name(f"{profile.stem}.routing.json")


class RoutingNote(BaseModel):
    """One change of the recorded figures."""

    model_config = ConfigDict(extra="forbid")
    date: str = Field(description="when the figures were measured (YYYY-MM-DD)")
    accuracy: dict[str, float] = Field(description="accuracy by policy on the record's items")
    why: str = Field(min_length=10, description="what changed routing, and the command that measured it")


class RoutingRecord(BaseModel):
    """What each policy answers right on a fixed sample of real items through one registry."""

    model_config = ConfigDict(extra="forbid")
    tasks: str = Field(description="the sample's task file, relative to the repository root")
    tolerance: float = Field(ge=0, le=1, description="how far an accuracy may move before the check fails")
    moved_calls: int = Field(ge=0, description="on how many items the first call may differ from `first_calls`")
    first_calls: dict[str, str] = Field(description=f"the {LEARNED} policy's first call by item id (a pair id, "
                                        f"`answer`, or `{INPUT_ERROR}`)")
    notes: list[RoutingNote] = Field(min_length=1, description="every change of the figures, oldest first; the "
                                     "last is what the check compares with")

    @model_validator(mode="after")
    def _guarded(self) -> RoutingRecord:
        missing = {LEARNED, BASELINE} - set(self.notes[-1].accuracy)
        if missing:
            raise ValueError(f"the last note records no figure for {sorted(missing)}")
        return self

    @property
    def accuracy(self) -> dict[str, float]:
        return self.notes[-1].accuracy

    @classmethod
    def read(cls, path: str | Path) -> RoutingRecord:
        return cls.model_validate(json.loads(Path(path).read_text()))

    def moved(self, calls: dict[str, str]) -> list[str]:
        """The items whose first call is not the recorded one (or that one side lacks), each as `id: recorded ->
        now`; empty while no more than `moved_calls` moved and both sides hold the same items."""
        items = sorted(set(calls) | set(self.first_calls))
        moved = [f"{item}: {self.first_calls.get(item)} -> {calls.get(item)}" for item in items
                 if self.first_calls.get(item) != calls.get(item)]
        return moved if len(moved) > self.moved_calls or set(calls) != set(self.first_calls) else []

    def problems(self, measured: dict[str, float]) -> list[str]:
        """Every way `measured` (accuracy by policy on the record's items) breaks the record, each in words."""
        found = []
        if measured[LEARNED] < measured[BASELINE]:
            found.append(f"{LEARNED} ({measured[LEARNED]:.3f}) is below {BASELINE} ({measured[BASELINE]:.3f})")
        for policy, recorded in self.accuracy.items():
            moved = measured[policy] - recorded
            if abs(moved) > self.tolerance + 1e-9:
                found.append(f"{policy}: {measured[policy]:.3f} against the recorded {recorded:.3f} (more than "
                             f"{self.tolerance:.3f} {'below' if moved < 0 else 'above'}); find what moved routing, "
                             "and add a note saying why if the change is meant")
        return found


def first_calls(registry: Registry, tasks: list[Task], policy: str = LEARNED) -> dict[str, str]:
    """The policy's greedy first action on each task as the router sees it before any call, in the view the graph's
    intake sets: a pair id, `answer`, or INPUT_ERROR. No expert runs but the text reader on a blank question's image
    (`episode.intake.read_question`), as in an episode, which routes on the text read (an INPUT_ERROR where that is
    no question) after that reading."""
    chooser = make_policy(policy)
    calls = {}
    for task in tasks:
        steps: tuple[Step, ...] = ()
        if is_blank(task.question) and task.images:
            reading, question, problem = read_question(registry, task.images)
            if problem:
                calls[task.id] = INPUT_ERROR
                continue
            task, steps = task.model_copy(update={"question": question}), (reading,)
        task = task.model_copy(update={"images": routed_images(task.question, task.images)})
        view = EpisodeView.of_task(task, steps, DEFAULT_MAX_TURNS, DEFAULT_MAX_COST)
        action = chooser.distribution(view, ActionSpace.build(registry, view)).greedy()
        calls[task.id] = f"{action.model}@@{action.skill}" if isinstance(action, Invoke) else "answer"
    return calls
