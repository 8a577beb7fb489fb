"""`maestro settings` prints every setting a run reads with its value and its source, through the command line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from maestro_graph.doors.cli import app


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_settings_name_their_source_and_hide_keys(tmp_path):
    recipe = tmp_path / "run.yaml"
    recipe.write_text("steps: 7\nseed: 3\n")
    runner = CliRunner()
    env = _json(runner.invoke(app, ["settings", "environment", "--json"],
                              env={"MAESTRO_API_KEY": "sk-secret", "MAESTRO_DEVICE": "cpu",
                                   "MAESTRO_IMAGE_HOSTS": None}))["environment"]
    rows = {r["setting"]: r for r in env}
    assert rows["MAESTRO_DEVICE"] == {"setting": "MAESTRO_DEVICE", "value": "cpu", "source": "environment"}
    assert rows["MAESTRO_API_KEY"]["value"] == "(set; not shown)" and "sk-secret" not in json.dumps(env)
    assert (rows["MAESTRO_IMAGE_HOSTS"]["value"], rows["MAESTRO_IMAGE_HOSTS"]["source"]) == ("", "default")
    train = {r["setting"]: r for r in _json(runner.invoke(app, ["settings", "train", "--config", str(recipe),
                                                                "--json"]))["train"]}
    assert (train["steps"]["value"], train["steps"]["source"]) == (7, str(recipe))
    assert (train["tasks_per_step"]["value"], train["tasks_per_step"]["source"]) == (16, "default")
    serve = _json(runner.invoke(app, ["settings", "serve", "--json"]))["serve"]
    assert {"setting": "max_turns", "value": 4, "source": "default"} in serve


def test_a_bad_settings_file_or_request_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stepz: 7\n")
    runner = CliRunner()
    result = runner.invoke(app, ["settings", "train", "--config", str(bad)])
    assert result.exit_code == 2 and "stepz" in result.output and "bad.yaml" in result.output
    result = runner.invoke(app, ["settings", "--config", str(bad)])
    assert result.exit_code == 2 and "name one of serve, train, train-lm" in result.output
