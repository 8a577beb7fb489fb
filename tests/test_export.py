"""Trajectory export from a real `maestro predict` run: TRL conversational records (tags and tool calls) and the
verl parquet layout, both loaded back with `datasets`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REAL, real_tasks
from typer.testing import CliRunner

from maestro_graph.doors.cli import app
from maestro_graph.policy.lm import option_pairs, parse_action, system_prompt
from maestro_graph.types import Answer, Invoke

TASKS = REAL / "tables" / "tasks.jsonl"
runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def predictions(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pred") / "pred.jsonl"
    _ok(["predict", "--tasks", str(TASKS), "--out", str(out), "--policy", "rules", "--limit", "3", "--workers", "1"])
    return out


def test_trl_export_loads_with_datasets_and_renders_the_router_conversation(predictions, tmp_path, registry):
    from datasets import load_dataset

    out = tmp_path / "trl.jsonl"
    _ok(["export", "--from", str(predictions), "--tasks", str(TASKS), "--format", "trl", "--out", str(out),
         "--cost-weight", "0.1"])
    data = load_dataset("json", data_files=str(out), split="train")
    preds = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(data) == len(preds) == 3
    for record, pred, task in zip(data, preds, real_tasks("tables")):
        messages = record["messages"]
        listed = option_pairs(registry.pairs(), task.question, task.choices)  # the experts by their numbers
        assert messages[0] == {"role": "system", "content": system_prompt(listed, 4)}
        assert task.question in messages[1]["content"] and "<image 1>" in messages[1]["content"]
        assert record["image_refs"] == [str(Path(p).resolve()) for p in task.images]
        actions = [parse_action(m["content"], [p.id for p in listed]) for m in messages[2:] if m["role"] == "assistant"]
        calls = [a for a in actions if isinstance(a, Invoke)]
        assert [c.pair for c in calls] == [f"{s['model']}@@{s['skill']}" for s in pred["steps"]]
        infos = [m["content"] for m in messages[2:] if m["role"] == "user"]
        assert len(infos) == len(pred["steps"]) and all(i.startswith("<information>") for i in infos)
        assert any("evidence:" in i for i in infos)  # the observation comes from the prediction record
        if pred["stop_reason"] == "policy":
            assert actions[-1] == Answer(pred["answer"])
        parts = record["rewards"]
        assert parts["outcome"] == pred["score"] and parts["cost"] == pytest.approx(-pred["cost"])
        assert record["reward"] == pytest.approx(parts["outcome"] + 0.1 * parts["cost"] + 0.5 * parts["format_errors"])


def test_an_answer_given_when_the_budget_ran_out_is_the_last_turn(tmp_path):
    """With one turn, every episode stops on the budget; the answer it gave follows "turns left: 0"."""
    pred, out = tmp_path / "pred.jsonl", tmp_path / "trl.jsonl"
    _ok(["predict", "--tasks", str(TASKS), "--out", str(pred), "--policy", "rules", "--limit", "2", "--workers", "1",
         "--max-turns", "1"])
    _ok(["export", "--from", str(pred), "--tasks", str(TASKS), "--format", "trl", "--out", str(out),
         "--max-turns", "1"])
    preds = [json.loads(line) for line in pred.read_text().splitlines()]
    answered = [(json.loads(line), p) for line, p in zip(out.read_text().splitlines(), preds) if p["answer"]]
    assert answered and all(p["stop_reason"] == "budget" for _, p in answered)
    for record, p in answered:
        assert "turns left: 0" in record["messages"][-2]["content"]
        assert parse_action(record["messages"][-1]["content"]) == Answer(p["answer"])


def test_tool_call_form_and_verl_parquet(predictions, tmp_path):
    from datasets import load_dataset

    tools = tmp_path / "tools.jsonl"
    _ok(["export", "--from", str(predictions), "--tasks", str(TASKS), "--format", "trl", "--tool-calls",
         "--out", str(tools)])
    record = json.loads(tools.read_text().splitlines()[0])
    assert record["tools"][0]["function"]["name"] == "search"
    calls = [m for m in record["messages"] if m.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["function"]["arguments"]["pair"].count("@@") == 1
    assert [m["role"] for m in record["messages"]].count("tool") == len(calls)

    parquet = tmp_path / "verl.parquet"
    _ok(["export", "--from", str(predictions), "--tasks", str(TASKS), "--format", "verl", "--out", str(parquet)])
    rows = load_dataset("parquet", data_files=str(parquet), split="train")
    assert set(rows.column_names) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "images"}
    task = real_tasks("tables")[0]
    row = rows[0]
    assert row["data_source"] == task.source and row["reward_model"] == {"style": "rule", "ground_truth": task.answer}
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and "<image>" in row["prompt"][1]["content"]
    assert row["images"][0]["image"].startswith("file://") and row["extra_info"]["id"] == task.id
    assert json.loads(row["extra_info"]["trajectory"])[0]["role"] == "system"


def test_export_refuses_records_from_another_task_file(predictions, tmp_path):
    other = REAL / "charts" / "tasks.jsonl"
    result = runner.invoke(app, ["export", "--from", str(predictions), "--tasks", str(other), "--out",
                                 str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2 and "is not in" in result.output


def test_export_reads_the_record_and_calls_no_expert(predictions, tmp_path):
    """Prediction records hold every step whole: exporting them makes no expert call (no cache hit or miss)."""
    from maestro_graph.cache.store import ExpertCache
    from maestro_graph.registry import Registry
    from maestro_graph.training.rl.export import export_file

    registry = Registry.load(cache=ExpertCache(tmp_path / "cache"))
    count, bad = export_file(predictions, TASKS, tmp_path / "trl.jsonl", "trl", registry)
    assert count == 3 and bad == []
    assert (registry.cache.stats.hits, registry.cache.stats.misses) == (0, 0)
    record = json.loads(predictions.read_text().splitlines()[0])
    assert record["version"] == 2 and record["decisions"] and "evidence" in record["steps"][0]
    assert record["decisions"][0]["log_prob"] is not None


def test_old_records_and_bad_lines_still_load(predictions, tmp_path):
    """A version-1 record (steps with pair, cost, answer and error only) loads without re-running anything; a torn
    or non-UTF-8 line is named and skipped, the others are exported."""
    from maestro_graph.training.rl.export import load_episodes

    first = json.loads(predictions.read_text().splitlines()[0])
    old = {k: v for k, v in first.items() if k not in ("version", "decisions")}
    old["steps"] = [{k: s[k] for k in ("model", "skill", "cost", "latency_s", "answer", "error")}
                    for s in first["steps"]]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(json.dumps(old).encode() + b"\n" + b"\xff\xfe not utf-8\n" + predictions.read_bytes()[:-40])
    episodes, bad = load_episodes(mixed, TASKS)
    second = json.loads(predictions.read_text().splitlines()[1])["id"]
    assert [t.id for t, _ in episodes] == [first["id"], first["id"], second]
    assert episodes[0][1].answer == first["answer"] and episodes[0][1].decisions == []
    assert len(bad) == 2 and "line 2: not valid UTF-8" in bad[0] and "line 5: malformed JSON" in bad[1]
