"""One recipe per shipped artifact, one config style, one source of each default: the recipes in configs/recipes/
are what `maestro train` and `maestro train-lm` run, every config's fields are its command's options, and no budget
is written twice."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer
import yaml
from conftest import REAL
from typer.testing import CliRunner

from maestro_graph.core.configs import Budget, build, load_yaml
from maestro_graph.doors.cli import app
from maestro_graph.doors.serve import ServeSettings
from maestro_graph.errors import ConfigError
from maestro_graph.training.rl.config import LMTrainConfig, NeuralGRPOConfig

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "configs" / "recipes"


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _params(command: str) -> list:
    """The parameters of one `maestro` command, as click builds them."""
    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]


def _options(command: str) -> set[str]:
    return {p.name for p in _params(command)}


def test_grpo_defaults_are_the_shipped_recipe():
    recipe = yaml.safe_load((RECIPES / "neural-grpo.yaml").read_text())
    assert (ROOT / recipe["registry"]).is_file()
    defaults = NeuralGRPOConfig()
    assert {k: getattr(defaults, k) for k in recipe if k != "registry"} == {k: v for k, v in recipe.items()
                                                                            if k != "registry"}
    assert (defaults.steps, defaults.cost_weight, defaults.advantage_std_floor) == (120, 0.1, 0.5)
    # the command docs/training.md gives for the shipped checkpoint is the recipe's
    text = (ROOT / "docs" / "training.md").read_text()
    assert "maestro train --config configs/recipes/neural-grpo.yaml" in text


@pytest.mark.slow
def test_train_runs_the_recipe_and_a_flag_wins_over_it(tmp_path, monkeypatch):
    """The recipe's registry and settings reach the trainer (recorded in its resume state); flags override them."""
    from maestro_graph.policy.neural import read_tensor_file

    monkeypatch.chdir(ROOT)  # the recipe's paths are relative to the working folder (the repository root)
    result = _invoke("train", "--config", str(RECIPES / "neural-grpo.yaml"), "--tasks",
                     str(REAL / "barcode" / "tasks.jsonl"), "--out", str(tmp_path / "run"), "--steps", "1",
                     "--tasks-per-step", "1", "--num-generations", "2", "--save-steps", "1")
    assert result.exit_code == 0, result.output
    header, _ = read_tensor_file(tmp_path / "run" / "checkpoint.safetensors")
    config = header["trainer"]["config"]
    assert config["registry"] == "configs/registry-nolm.yaml" and config["steps"] == 1
    assert (config["cost_weight"], config["advantage_std_floor"], config["num_generations"]) == (0.1, 0.5, 2)


def test_the_earlier_spellings_of_trl_named_settings_are_refused_with_the_new_name(tmp_path):
    """`group_size` and the rest are TRL's `num_generations` etc. now: a recipe or a flag under the old name stops
    before anything runs, naming the new one, rather than training with the default."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text("steps: 1\ngroup_size: 4\n")
    with pytest.raises(ConfigError, match="'group_size' is now spelled 'num_generations'") as caught:
        load_yaml(NeuralGRPOConfig, recipe)
    assert caught.value.file == str(recipe) and caught.value.field == "group_size"
    for old, new in NeuralGRPOConfig.RENAMED.items():
        result = _invoke("train", "--tasks", str(REAL / "barcode" / "tasks.jsonl"), "--out", str(tmp_path / "run"),
                         f"--{old.replace('_', '-')}", "2")
        assert result.exit_code == 2 and f"now spelled '{new}'" in " ".join(result.output.split()), result.output
        assert hasattr(NeuralGRPOConfig(), new)
    assert not (tmp_path / "run").exists()


def test_research_switches_keep_their_options_but_leave_the_help_to_what_users_set():
    research = {"--call-weight", "--warm-start-steps", "--family-dropout", "--stop-without-answer"}
    shown = _invoke("train", "--help").output
    listed = " ".join(shown.split())
    assert "Research switches" in listed and all(flag in listed for flag in research)
    assert not [line for line in shown.splitlines() if any(line.strip().startswith(flag) for flag in research)]
    hidden = {p.name for p in _params("train") if p.hidden and not p.name.startswith("renamed_")}
    assert not hidden ^ {f[2:].replace("-", "_") for f in research}
    assert dataclasses.asdict(build(NeuralGRPOConfig, {"family_dropout": 0.2}))["family_dropout"] == 0.2


def test_lm_recipe_takes_its_task_files_as_arguments(tmp_path):
    recipe = yaml.safe_load((RECIPES / "lm-router-sft.yaml").read_text())
    assert not {"tasks", "eval_tasks", "sft_data"} & set(recipe)  # no path a clone lacks
    assert all(not str(v).startswith("runs/") for k, v in recipe.items() if k != "out_dir")
    config = load_yaml(LMTrainConfig, RECIPES / "lm-router-sft.yaml", tasks=["t.jsonl"], sft_data="s.jsonl")
    assert (config.steps, config.sft_steps, config.lora_r, config.constrained, config.order) == (
        0, 40, 8, "choice", "neural")
    # every field is an option of `maestro train-lm` but the YAML-only mapping; a missing task file is named
    assert _options("train-lm") >= {f.name for f in dataclasses.fields(LMTrainConfig)} - {"extra_grpo_args"}
    missing = _invoke("train-lm", "--config", str(RECIPES / "lm-router-sft.yaml"))
    assert missing.exit_code == 2 and "tasks" in missing.output and "at least one task file" in missing.output
    bad = _invoke("train-lm", "--config", str(RECIPES / "lm-router-sft.yaml"), "--tasks", "t.jsonl",
                  "--sft-data", "s.jsonl", "--lora-r", "-1")
    assert bad.exit_code == 2 and "lora_r=-1" in bad.output and "lm-router-sft.yaml" in bad.output


def test_every_serve_setting_is_an_option_and_a_config_key(tmp_path):
    assert _options("serve") >= set(ServeSettings.model_fields)
    config = tmp_path / "serve.yaml"
    config.write_text("workers: 9\nmax_episodes: 2\n")
    result = _invoke("serve", "--config", str(config))
    assert result.exit_code == 2 and "exceeds max_episodes" in result.output and "serve.yaml" in result.output
    assert "errors.pydantic.dev" not in result.output
    not_a_folder = _invoke("serve", "--image-dir", str(ROOT / "README.md"))
    assert not_a_folder.exit_code == 2 and "is a file, not a directory" in not_a_folder.output
    # a flag wins over the file, and only the fields given count as given (`--api-key-env` named or not)
    settings = build(ServeSettings, {"workers": 1, "allowed_image_hosts": ["example.org"]})
    assert settings.model_fields_set == {"workers", "allowed_image_hosts"}


def test_the_budgets_are_written_once():
    """No module of the package writes the turn budget 4 or the cost budget 10.0 as a default: each comes from
    configs (DEFAULT_MAX_TURNS, DEFAULT_MAX_COST, the bounds MAX_TURNS and MAX_COST)."""
    assert (Budget().max_turns, Budget().max_cost) == (4, 10.0)
    literals = [
        re.compile(r"max_turns\b[^\n#]*?[=(,:]\s*(4|64)\b(?!\.\d)"),  # max_turns: int = 4, max_turns=4, Field(4, le=64
        re.compile(r"max_cost\b[^\n#]*?[=(,:]\s*10(\.0*)?\b(?!\.[1-9])"),
        re.compile(r"\b(MAX_TURNS|MAX_COST)\s*=\s*\d"),
        re.compile(r"(?i)max_?(turns|cost)\w*\s*=\s*typer\.Option\(\s*\d"),  # MaxTurnsOpt = typer.Option(4, ...
    ]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "maestro_graph").rglob("*.py")) if path.name != "configs.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if any(p.search(line) for p in literals)]
    assert not found, "budget literals outside maestro_graph/core/configs.py:\n" + "\n".join(found)
    options = {"ask", "predict", "eval", "export"}
    group = typer.main.get_command(app)
    for name in options:
        [turns] = [p for p in group.commands[name].params if p.name == "max_turns"]  # type: ignore[attr-defined]
        assert turns.default == Budget().max_turns, name


def test_numbers_in_a_config_file_are_numbers(tmp_path):
    """YAML reads `2e-3` as a string; a config field that is a number takes it as one, and refuses a word by name."""
    config = tmp_path / "lm.yaml"
    config.write_text("tasks: [t.jsonl]\nsft_data: s.jsonl\nsft_steps: 1\nsft_learning_rate: 2e-3\nlora_r: 8\n")
    loaded = load_yaml(LMTrainConfig, config)
    assert loaded.sft_learning_rate == 0.002 and isinstance(loaded.sft_learning_rate, float)
    config.write_text("tasks: [t.jsonl]\nsteps: lots\n")
    with pytest.raises(ConfigError, match="steps='lots' is not an integer") as info:
        load_yaml(LMTrainConfig, config)
    assert info.value.file == str(config)


def test_a_yes_no_setting_a_recipe_turns_on_can_be_turned_off_by_a_flag(tmp_path):
    """`--no-use-cpu` trains the CPU recipe on a GPU: every yes/no field is a switch pair, and the flag wins over the
    file either way; left out, the file's value stands."""
    from maestro_graph.core.configs import typer_options

    assert {"--use-cpu", "--no-use-cpu"} <= {o for p in _params("train-lm") for o in [*p.opts, *p.secondary_opts]}
    seen: list[LMTrainConfig] = []
    app_ = typer.Typer()
    app_.command()(typer_options(LMTrainConfig)(lambda config: seen.append(config)))
    recipe = str(RECIPES / "lm-router-sft.yaml")  # use_cpu: true, bf16 unset (bf16 exactly on a GPU)
    cases = (([], (True, None, False)), (["--no-use-cpu"], (False, None, True)),
             (["--bf16"], (True, True, True)), (["--no-bf16", "--no-use-cpu"], (False, False, False)))
    for flags, expected in cases:
        result = CliRunner().invoke(app_, ["--config", recipe, "--tasks", "t.jsonl", "--sft-data", "s.jsonl", *flags])
        assert result.exit_code == 0, result.output
        assert (seen[-1].use_cpu, seen[-1].bf16, seen[-1].uses_bf16) == expected, flags
