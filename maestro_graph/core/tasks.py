"""Task files (JSONL, image paths relative to the file), read item by item so one bad line loses nothing else.

The file is read as bytes and each line decoded on its own: a line that is not UTF-8 is one bad line, not a failed
run, and a UTF-8 byte-order mark (which some editors write) is not part of line 1.

Image paths must stay inside the allowed directories (by default the task file's own folder), after resolving `..`
and symbolic links: a task file cannot make an episode read `/etc/passwd` or another user's files. Remote URLs are
refused (download the images next to the task file)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from ..choices import inline_choices
from ..digests import file_digest
from ..errors import first_validation_problem
from ..scoring import score
from .jsonl import read_jsonl

__all__ = ["Task", "TaskProblem", "load_task_files", "load_tasks", "ANSWER_TYPES"]

ANSWER_TYPES = ("number", "text", "yesno", "choice", "pair")


class Task(BaseModel):
    """One item. Only `question`, `images` and `choices` ever reach a policy."""

    id: str = Field(min_length=1)
    question: str
    images: list[str] = Field(default_factory=list)
    choices: list[str] | None = None
    answer: str | None = None
    answer_type: Literal["number", "text", "yesno", "choice", "pair"] = "text"
    tolerance: float | None = Field(None, ge=0)
    source: str | None = None
    domain: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def options(self) -> list[str] | None:
        """The item's choices as an episode sees them: the `choices` given, else those written in the question
        (`choices.inline_choices`, what the graph's intake reads), so that a letter answer to inline options scores."""
        return self.choices or inline_choices(self.question)

    @property
    def chance(self) -> float:
        """The expected score of a uniform guess, the floor a source's accuracy is read against (the foundation
        figures' definition): 1/len(options) for an item with options, 1/2 for a yes/no answer, 0 otherwise."""
        options = self.options
        if options:
            return 1.0 / len(options)
        return 0.5 if self.answer_type == "yesno" else 0.0

    def identity(self) -> tuple:
        """The question and the images' content: the same item copied into another folder is still the same item
        (what keeps evaluation items out of training)."""
        return self.question, tuple(file_digest(ref) for ref in self.images)

    def image_files(self) -> list[str]:
        """The image files the item reads (data URLs carry their bytes): what a worker on another machine must be
        sent (batch.executors.CarriesImages)."""
        return [ref for ref in self.images if not ref.startswith("data:")]

    def with_image_files(self, paths: dict[str, str]) -> Task:
        """The same item reading each image file from `paths[file]` instead: the worker's copy of the same bytes,
        so content digests (cache keys, features) and records stay the driver's."""
        return self.model_copy(update={"images": [paths.get(ref, ref) for ref in self.images]})

    def score(self, prediction: str | None) -> float:
        """The prediction scored against this item's answer key (0.0 when the item has none)."""
        if self.answer is None:
            return 0.0
        return score(prediction, self.answer, self.answer_type, tolerance=self.tolerance, choices=self.options)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_to_str(cls, value: Any) -> Any:
        return None if value is None else str(value)

    @field_validator("choices", mode="before")
    @classmethod
    def _choices_to_str(cls, value: Any) -> Any:
        return [str(c) for c in value] if isinstance(value, list) else value


@dataclass(frozen=True)
class TaskProblem:
    """A line of a task file that could not be used, and why."""

    file: str
    line: int
    id: str | None
    error: str


def _image_problem(ref: str, base: Path, allowed: list[Path]) -> str | None:
    if "://" in ref:
        return f"image {ref!r}: remote URLs are not allowed in task files; download the image next to the file"
    resolved = (base / ref).resolve()
    if not any(resolved.is_relative_to(root) for root in allowed):
        return (f"image {ref!r} resolves to {resolved}, outside the allowed directories "
                f"{[str(r) for r in allowed]}")
    return None


def load_tasks(
    path: str | Path, *, check_images: bool = True, allowed_dirs: Sequence[str | Path] | None = None
) -> tuple[list[Task], list[TaskProblem]]:
    """Parse a task file. Image paths become absolute and must lie inside `allowed_dirs` (default: the task file's
    folder); bad lines are returned as problems, not raised."""
    path = Path(path)
    base = path.parent.resolve()
    allowed = [Path(d).resolve() for d in allowed_dirs] if allowed_dirs is not None else [base]
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    for line in read_jsonl(path):
        number, raw_id = line.number, None
        if line.problem is not None:
            problems.append(TaskProblem(str(path), number, None, line.problem))
            continue
        try:
            raw = line.value
            if not isinstance(raw, dict):
                raise ValueError("a task line must be a JSON object")
            raw_id = raw.get("id")
            task = Task.model_validate(raw)
        except ValidationError as exc:
            problems.append(TaskProblem(str(path), number, raw_id, first_validation_problem(exc)[1]))
            continue
        except ValueError as exc:
            problems.append(TaskProblem(str(path), number, raw_id, str(exc)))
            continue
        if task.id in seen:
            problems.append(TaskProblem(str(path), number, task.id, f"duplicate id {task.id!r}"))
            continue
        outside = next((m for m in (_image_problem(p, base, allowed) for p in task.images
                                    if not p.startswith("data:")) if m), None)
        if outside:
            problems.append(TaskProblem(str(path), number, task.id, outside))
            continue
        images = [str((base / p).resolve()) if not p.startswith("data:") else p for p in task.images]
        missing = [p for p in images if check_images and not p.startswith("data:") and not Path(p).is_file()]
        if missing:
            problems.append(TaskProblem(str(path), number, task.id, f"missing image {missing[0]}"))
            continue
        seen.add(task.id)
        tasks.append(task.model_copy(update={"images": images}))
    return tasks, problems


def load_task_files(files: Sequence[Path]) -> tuple[list[Task], list[TaskProblem]]:
    """Tasks of several files; ids are prefixed with the file stem when files are combined, so they stay unique."""
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    for path in files:
        got, bad = load_tasks(path)
        if len(files) > 1:
            got = [t.model_copy(update={"id": f"{Path(path).stem}:{t.id}"}) for t in got]
        tasks += got
        problems += bad
    return tasks, problems
