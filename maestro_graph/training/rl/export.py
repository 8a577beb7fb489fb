"""Trajectory export: episodes of any policy (prediction files of `maestro predict`, rollouts of `maestro train-lm`)
as TRL conversational records or as the Maestro/verl parquet layout.

Each episode is rendered with the LM router's own conversation builder (system prompt from the cards, the user
turn, an assistant action and an `<information>` turn per step, the final `<answer>`), so an exported trajectory is
exactly what the LM policy would have read and written. Every observation comes from the record itself (prediction
files hold each step whole): exporting makes no expert call.

- `trl`: one JSON line per episode: `id`, `messages` (tags, or with `tool_calls=True` assistant tool calls of a
  `search` function and `tool` turns), `tools` (the function schema, tool-call form only), `image_refs` (absolute
  paths; TRL's own `images` column would make its trainers load pixels), `answer`, `stop_reason`, `reward` and its
  named parts `rewards` (`outcome`, `cost`, `format_errors`: maestro_graph/training/rl/rewards.py).
- `verl`: parquet rows `data_source`, `prompt` (system + user, `<image>` placeholders), `ability`, `reward_model`
  (`style: rule`, `ground_truth`), `extra_info` (id, index, question, choices, answer type, tolerance, the reward
  parts and the trajectory as JSON), `images` (`[{"image": "file://..."}]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ...core.configs import DEFAULT_MAX_COST, DEFAULT_MAX_TURNS
from ...core.jsonl import read_jsonl
from ...core.tasks import Task, load_tasks
from ...episode.runner import EpisodeResult
from ...errors import ConfigError, first_validation_problem, import_extra
from ...policy.base import ActionSpace, EpisodeView, Policy, measured_accuracy
from ...policy.lm.policy import opening_ranking
from ...policy.lm.prompt import PromptOptions, conversation, final_answer_message
from ...registry import Registry
from ...types import Step, StopReason
from .rewards import Rewards

__all__ = [
    "SEARCH_TOOL",
    "ExportOptions",
    "episode_messages",
    "export_file",
    "load_episodes",
    "option_scores",
    "trl_record",
    "verl_row",
]

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Call one expert pair MODEL@@SKILL on the question's images; returns its answer and evidence.",
        "parameters": {
            "type": "object",
            "properties": {
                "pair": {"type": "string", "description": "a valid MODEL@@SKILL id"},
                "request": {"type": "string", "description": "what to ask; empty passes the question"},
            },
            "required": ["pair"],
        },
    },
}
"""The tool-call form of `<search>` (the tag form is the default)."""


@dataclass(frozen=True)
class ExportOptions:
    max_turns: int = DEFAULT_MAX_TURNS
    """The turn budget the episodes ran with (shown to the router as turns left)."""
    max_cost: float = DEFAULT_MAX_COST
    """The cost budget the episodes ran with (what the `ranker` sees of the opening state)."""
    cost_weight: float = 0.0
    format_weight: float = 0.5
    tool_calls: bool = False
    prompt: PromptOptions = PromptOptions()
    ranker: Policy | None = None
    """The policy whose opening choice ranks the options (a composite router's `order: neural`), or None: ranked by
    the reach where the prompt is ranked."""
    served: Registry | None = None
    """The registry the router is served with, whose cards the `ranker` reads (`opening_ranking`); None: the
    rendered one."""

    @property
    def rewards(self) -> Rewards:
        return Rewards.make(cost_weight=self.cost_weight, format_weight=self.format_weight)


def load_episodes(records_file: str | Path,
                  tasks_file: str | Path) -> tuple[list[tuple[Task, EpisodeResult]], list[str]]:
    """(task, episode) for each record whose id is in the task file, and the problems of lines that could not be
    read (named by line; the others still load). A record whose id is not in the task file is a ConfigError: the
    records belong to another task file."""
    tasks, problems = load_tasks(tasks_file)
    if problems:
        raise ConfigError(f"{len(problems)} bad lines, first: line {problems[0].line}: {problems[0].error}",
                          file=str(tasks_file))
    by_id: dict[object, Task] = {t.id: t for t in tasks}  # looked up by a record's id, whatever JSON it holds
    out, bad = [], []
    for line in read_jsonl(records_file):
        record = line.value
        if line.problem is not None or not isinstance(record, dict):
            bad.append(f"{records_file}: line {line.number}: {line.problem or 'not a JSON object'}")
            continue
        task = by_id.get(record.get("id"))
        if task is None:
            raise ConfigError(f"line {line.number}: id {record.get('id')!r} is not in {tasks_file}; pass the task "
                              "file the records came from", file=str(records_file))
        try:
            out.append((task, EpisodeResult.from_record(record)))
        except ValidationError as exc:
            bad.append(f"{records_file}: line {line.number}: {first_validation_problem(exc)[1]}")
    return out, bad


def _as_tool_calls(messages: list[dict], steps: list[Step]) -> list[dict]:
    """The tag conversation with each step's `<search>` as a `search` tool call and its observation as a tool turn
    (outputs that were no action stay assistant text, answered by a user turn)."""
    out = messages[:2]
    for i, step in enumerate(steps):
        action, observation = messages[2 + 2 * i], messages[3 + 2 * i]
        if step.model or step.skill:
            out.append({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "search", "arguments": {"pair": step.pair, "request": step.input}}}]})
            out.append({"role": "tool", "name": "search", "content": observation["content"]})
        else:
            out += [action, observation]
    return out + messages[2 + 2 * len(steps):]


def option_scores(task: Task, registry: Registry, options: ExportOptions) -> dict[str, float] | None:
    """What ranks (or is shown on) the options of `task`'s prompt: the `ranker`'s opening probabilities, from the
    state a served router's ranker sees at the first decision (so a rendering's option 1 is the expert the served
    router's option 1 would be), else the reach's figures where the prompt reads them."""
    if options.ranker is not None:
        view = EpisodeView.of_task(task, (), options.max_turns, options.max_cost)
        return opening_ranking(options.ranker, view, ActionSpace.build(registry, view), options.served)
    return measured_accuracy(registry, task.question, task.images, task.options) if options.prompt.reads_reach else None


def episode_messages(task: Task, episode: EpisodeResult, registry: Registry, options: ExportOptions) -> list[dict]:
    accuracy = option_scores(task, registry, options)
    messages = conversation(task.question, task.choices, len(task.images), episode.steps, registry.pairs(),
                            options.max_turns, options.prompt, accuracy)
    gave_up = bool(episode.decisions) and episode.decisions[-1].kind == "answer" and not episode.decisions[-1].forced
    if episode.stop in (StopReason.POLICY, StopReason.BUDGET) and (episode.answer is not None or gave_up):
        # after "turns left: 0" the router is asked once more, for an answer only: that answer is its last turn
        # (an empty answer too: it is the router's own action, and a trainer must see it)
        messages.append(final_answer_message(episode.answer))
    return _as_tool_calls(messages, episode.steps) if options.tool_calls else messages


def _reward_parts(task: Task, episode: EpisodeResult, options: ExportOptions) -> dict:
    """The episode's reward and its named parts (`rewards`: outcome, cost, format_errors), as training computes
    them."""
    rewards = options.rewards
    parts = rewards.parts(task, episode)
    return {"reward": rewards.total(parts), "rewards": parts}


def _image_refs(task: Task) -> list[str]:
    remote = ("data:", "http://", "https://")
    return [ref if ref.startswith(remote) else str(Path(ref).resolve()) for ref in task.images]


def trl_record(task: Task, episode: EpisodeResult, registry: Registry, options: ExportOptions) -> dict:
    record = {"id": task.id, "messages": episode_messages(task, episode, registry, options),
              "image_refs": _image_refs(task), "answer": episode.answer, "stop_reason": episode.stop_reason,
              **_reward_parts(task, episode, options)}
    if options.tool_calls:
        record["tools"] = [SEARCH_TOOL]
    return record


def verl_row(index: int, task: Task, episode: EpisodeResult, registry: Registry, options: ExportOptions) -> dict:
    messages = episode_messages(task, episode, registry, options)
    prompt = [dict(m) for m in messages[:2]]
    prompt[1]["content"] = re.sub(r"<image \d+>", "<image>", prompt[1]["content"])
    parts = _reward_parts(task, episode, options)
    return {
        "data_source": task.source or "maestro",
        "prompt": prompt,
        "ability": task.domain or "multimodal-qa",
        "reward_model": {"style": "rule", "ground_truth": task.answer or ""},
        "extra_info": {"index": index, "id": task.id, "question": task.question, "choices": task.choices or [],
                       "answer_type": task.answer_type, "tolerance": task.tolerance, **parts,
                       "trajectory": json.dumps(messages, ensure_ascii=False)},
        "images": [{"image": ref if ref.startswith(("data:", "http")) else f"file://{ref}"}
                   for ref in _image_refs(task)],
    }


def export_file(records_file: str | Path, tasks_file: str | Path, out: str | Path, fmt: Literal["trl", "verl"],
                registry: Registry, options: ExportOptions = ExportOptions(),
                keep: Callable[[Task, EpisodeResult], bool] | None = None) -> tuple[int, list[str]]:
    """Write the export of the episodes `keep` selects (default: all); returns the number of episodes written and
    the lines that could not be read."""
    episodes, bad = load_episodes(records_file, tasks_file)
    episodes = [(t, e) for t, e in episodes if keep is None or keep(t, e)]
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "trl":
        _write_jsonl(out_path, (trl_record(t, e, registry, options) for t, e in episodes))
    elif fmt == "verl":
        pa = import_extra("pyarrow", "train", "verl (Parquet) export")
        import pyarrow.parquet as pq

        rows = [verl_row(i, t, e, registry, options) for i, (t, e) in enumerate(episodes)]
        pq.write_table(pa.Table.from_pylist(rows), out_path)
    else:
        raise ConfigError(f"unknown export format {fmt!r}; use trl or verl", field="format")
    return len(episodes), bad


def _write_jsonl(path: Path, records: Iterable[dict]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
