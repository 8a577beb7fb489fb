"""How sure an answer is: the confidence model (fitted, saved as data, read back or refused), the
expected calibration error, and `maestro calibrate` on prediction records. The doors that carry `answer_source` and
`confidence` are tested with their own clients (test_serve, test_embedded, test_cli, test_evaluation)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from maestro_graph.core.calibration import ConfidenceModel, expected_calibration_error, reliability_bins
from maestro_graph.doors.cli import app
from maestro_graph.episode.confidence import answer_confidence, shipped_confidence
from maestro_graph.errors import ConfigError
from maestro_graph.training.evaluation.calibration import chance_worst_gap


def _sample(n: int, seed: int) -> tuple[list[dict], list[float]]:
    """Answers whose chance of being right is sigmoid(-1 + 3 * support_accuracy - against)."""
    rng = np.random.default_rng(seed)
    rows = [{"support_accuracy": float(a), "against": float(g)}
            for a, g in zip(rng.uniform(0, 1, n), rng.random(n) < 0.3)]
    p = [1 / (1 + np.exp(1 - 3 * r["support_accuracy"] + r["against"])) for r in rows]
    return rows, [float(x) for x in rng.random(n) < p]


def test_the_expected_calibration_error_weighs_each_bins_gap_by_its_answers():
    confidence, right = [0.15, 0.15, 0.95, 0.95], [0, 1, 1, 1]
    assert expected_calibration_error(confidence, right) == pytest.approx((2 * 0.35 + 2 * 0.05) / 4)
    bins = reliability_bins(confidence, right)
    assert len(bins) == 10 and bins[1].count == 2 and bins[1].accuracy == 0.5 and bins[5].count == 0
    assert reliability_bins([1.0], [1])[9].count == 1  # a confidence of 1 is in the last bin
    assert expected_calibration_error([], []) is None
    # weighted (source-balanced): a bin's gap weighs by its answers' weights, its mean confidence too
    assert expected_calibration_error([0.15, 0.95], [0, 1], weights=[3, 1]) == pytest.approx((3 * 0.15 + 0.05) / 4)
    assert reliability_bins([0.1, 0.19], [0, 1], weights=[3, 1])[1].accuracy == pytest.approx(0.25)


def test_the_gap_by_chance_alone_shrinks_with_the_answers_a_bin_holds():
    """A perfectly calibrated model's worst bin is off by about the binomial standard error of its answers: at 0.5,
    sqrt(0.25 / n), so some 0.08 for a bin of 40 answers and 0.008 for one of 4,000."""
    few, many = chance_worst_gap([0.55] * 40), chance_worst_gap([0.55] * 4000)
    assert 0.03 < few[0] < 0.12 and few[1] > few[0]
    assert many[1] < 0.02 and many[0] < few[0] / 4
    assert chance_worst_gap([0.55] * 40) == few  # seeded: the same figure every run


def test_a_fitted_model_is_calibrated_on_other_answers_and_survives_a_round_trip(tmp_path):
    model = ConfidenceModel.fit(*_sample(3000, seed=0), fitted_on="synthetic")
    assert model.weights["support_accuracy"] == pytest.approx(3, abs=0.4)
    assert model.weights["against"] == pytest.approx(-1, abs=0.3)
    rows, right = _sample(3000, seed=1)
    assert expected_calibration_error([model.probability(r) for r in rows], right) < 0.03
    constant = expected_calibration_error([float(np.mean(right))] * len(right), right)
    assert constant < 0.01  # a constant at the base rate is calibrated too: the fit must also separate answers
    assert np.std([model.probability(r) for r in rows]) > 0.15
    model.save(tmp_path / "confidence.json")
    assert ConfidenceModel.read(tmp_path / "confidence.json").probability(rows[0]) == pytest.approx(
        model.probability(rows[0]), abs=1e-5)


@pytest.mark.parametrize(("body", "field"), [
    ("not json", None), (json.dumps({"format": "other"}), "format"),
    (json.dumps({"format": "maestro-confidence-1", "bias": 0, "weights": {"reach": "high"}}), "weights"),
    (json.dumps({"format": "maestro-confidence-1", "bias": None, "weights": {}}), "bias"),
])
def test_a_broken_model_file_is_refused_naming_the_file_and_field(tmp_path, body, field):
    path = tmp_path / "confidence.json"
    path.write_text(body)
    with pytest.raises(ConfigError) as refused:
        ConfidenceModel.read(path)
    assert str(path) in str(refused.value) and (field is None or f"field {field!r}" in str(refused.value))


def test_the_shipped_model_says_an_experts_measured_answer_is_surer_than_a_guess():
    model = shipped_confidence()
    read = {"support_accuracy": 2.0, "support": 1.0, "skill_confidence": 0.9, "skill_logit": 2.2,
            "skill_support": 1.8, "calls": 1.0, "reach": 1.0, "form_number": 1.0}
    guess = {"source_guess": 1.0, "form_choice": 1.0, "chance": 0.25, "calls": 1.0, "against": 1.0,
             "skill_logit": -3.9}
    assert answer_confidence(model, read) > 0.8 and model.items > 100
    assert answer_confidence(model, guess) == 0.25  # one in four options, whatever the fit would say
    assert "source_guess" not in model.weights  # guesses are not fitted on


def test_guesses_are_right_as_often_as_their_chance_and_are_not_fitted_on(tmp_path):
    """A model fitted where the few guesses were all wrong still says a guess among four options is right one time
    in four, and its weights come from the other answers alone."""
    rows, right = _sample(400, seed=5)
    rows = [{**r, "source_guess": 0.0, "chance": 0.0} for r in rows]
    guesses = [{"source_guess": 1.0, "chance": 0.25, "form_choice": 1.0}] * 8
    _records(tmp_path / "fit.jsonl", rows + guesses, right + [0.0] * 8)
    result = CliRunner().invoke(app, ["calibrate", "--predictions", str(tmp_path / "fit.jsonl"), "--out",
                                      str(tmp_path / "model.json")])
    assert result.exit_code == 0, result.output
    model = ConfidenceModel.read(tmp_path / "model.json")
    assert answer_confidence(model, guesses[0]) == 0.25 and "source_guess" not in model.weights
    assert model.items == 400


def _records(path, rows, right, *, basis=True, source="s"):
    path.write_text("".join(json.dumps({"id": f"t{i}", "answer": "x", "score": y, "source": source,
                                        **({"confidence_basis": r} if basis else {})}) + "\n"
                            for i, (r, y) in enumerate(zip(rows, right))))


def test_calibrate_fits_on_scored_records_and_checks_on_others(tmp_path):
    _records(tmp_path / "fit.jsonl", *_sample(2000, seed=2))
    _records(tmp_path / "check.jsonl", *_sample(2000, seed=3))
    result = CliRunner().invoke(app, ["calibrate", "--predictions", str(tmp_path / "fit.jsonl"), "--check",
                                      str(tmp_path / "check.jsonl"), "--out", str(tmp_path / "model.json")])
    assert result.exit_code == 0, result.output
    model = ConfidenceModel.read(tmp_path / "model.json")
    assert model.items == 2000 and model.fitted_on == str(tmp_path / "fit.jsonl")
    checked = next(line for line in result.output.splitlines() if "checked on" in line)
    assert float(checked.split("│")[4]) < 0.04  # the ECE column, on the other answers
    median, high = map(float, checked.split("│")[7].split("/"))  # a calibrated model's worst gap on 2,000 answers
    assert 0 < median < high < 0.1

    _records(tmp_path / "old.jsonl", *_sample(3, seed=4), basis=False)
    refused = CliRunner().invoke(app, ["calibrate", "--predictions", str(tmp_path / "old.jsonl"), "--out",
                                       str(tmp_path / "never.json")])
    assert refused.exit_code == 2 and not (tmp_path / "never.json").exists()
    assert f"file {tmp_path / 'old.jsonl'}, field 'confidence_basis': line 1 (t0)" in " ".join(refused.output.split())


def test_leaving_a_source_out_shows_where_the_model_does_not_carry(tmp_path):
    """Two sources the features describe alike, and a third whose answers are all right whatever the features say:
    fitted without it, the model misjudges it (a large ECE in its fold) while the others' folds stay calibrated; the
    pooled row and a diagram per source are written."""
    for name, seed in (("a", 5), ("b", 6)):
        _records(tmp_path / f"{name}.jsonl", *_sample(1500, seed=seed), source=name)
    rows, _ = _sample(300, seed=7)
    _records(tmp_path / "c.jsonl", rows, [1.0] * len(rows), source="c")
    files = [str(tmp_path / f"{n}.jsonl") for n in "abc"]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [
        "calibrate", "--predictions", files[0], "--predictions", files[1], "--check", files[2],
        "--out", str(tmp_path / "model.json"), "--leave-one-source-out", "--figures", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    folds = {cells[1].strip(): [c.strip() for c in cells[2:-1]] for cells in
             (line.split("│") for line in result.output.splitlines()) if len(cells) == 8 and
             cells[1].strip() in ("a", "b", "c", "all")}
    assert set(folds) == {"a", "b", "c", "all"} and folds["c"][0] == "300" and folds["all"][0] == "3300"
    assert max(float(folds["a"][3]), float(folds["b"][3])) < 0.1 < 0.2 < float(folds["c"][3])
    checked = next(line for line in result.output.splitlines() if "checked on" in line).split("│")
    assert float(checked[4]) > 0.2 and float(checked[5]) > 0.2  # all answers of c, weighed alike or not
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [f"loso-{n}.png" for n in ("a", "all", "b", "c")]
