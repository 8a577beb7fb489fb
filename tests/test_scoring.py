"""Scoring as docs/evaluation.md states it, shared by prediction, evaluation and rewards."""

import pytest

from maestro_graph.numbers import parse_number
from maestro_graph.scoring import choice_label, label_index, score


@pytest.mark.parametrize(
    ("pred", "answer", "kind", "tol", "choices", "expected"),
    [
        ("$1,234.50", "1234.5", "number", 0.0, None, 1.0),
        ("45%", "45", "number", 0.0, None, 1.0),
        ("{5}", "5", "number", None, None, 1.0),
        ("103", "100", "number", 0.05, None, 1.0),
        ("106", "100", "number", 0.05, None, 0.0),
        ("7.6", "7.60", "number", 0.0, None, 1.0),
        ("True", "Yes", "yesno", None, None, 1.0),
        ("no.", "No", "yesno", None, None, 1.0),
        ("Yes", "No", "yesno", None, None, 0.0),
        ("(3, 4)", "(3,4)", "pair", None, None, 1.0),
        ("(4,3)", "(3,4)", "pair", None, None, 0.0),
        ("B", "35°", "text", None, ["55°", "35°", "25°"], 1.0),
        ("35°", "35°", "text", None, ["55°", "35°", "25°"], 1.0),
        ("C", "35°", "text", None, ["55°", "35°", "25°"], 0.0),
        ("D", "D", "choice", None, ["A:x", "B:y", "C:z", "D:w"], 1.0),
        ("c", "c", "choice", None, list("abcde"), 1.0),
        ("a", "c", "choice", None, list("abcde"), 0.0),
        ("  Hong  Kong. ", "Hong Kong", "text", None, None, 1.0),
        ("Hong", "Hong Kong", "text", None, None, 0.0),
        (None, "5", "number", None, None, 0.0),
        ("", "Yes", "yesno", None, None, 0.0),
    ],
)
def test_score(pred, answer, kind, tol, choices, expected):
    assert score(pred, answer, kind, tolerance=tol, choices=choices) == expected


def test_parse_number_forms():
    assert parse_number("3/4") == 0.75
    assert parse_number("\\frac{20}{3}") == pytest.approx(20 / 3)
    assert parse_number("−2.5 cm") == -2.5
    assert parse_number("no digits") is None


def test_unknown_answer_type_is_an_error():
    with pytest.raises(ValueError, match="unknown answer_type"):
        score("1", "1", "float")


def test_labels_past_z_stay_letters_and_name_their_option():
    """Option 28 was labelled "\\" and the scoring regex built from it raised."""
    assert [choice_label(i) for i in (0, 25, 26, 27, 29, 701, 702)] == ["A", "Z", "AA", "AB", "AD", "ZZ", "AAA"]
    assert all(label_index(choice_label(i)) == i for i in range(800))
    assert label_index("ab") == 27 and label_index("A1") is None and label_index("") is None
    options = [f"word {i}" for i in range(30)]
    assert score("AD", "word 29", "choice", choices=options) == 1.0
    assert score("(AB)", "ab", "choice", choices=options) == 1.0  # a gold answer given as the label
    assert score("A", "word 29", "choice", choices=options) == 0.0
    assert score("word 29", "word 27", "choice", choices=options) == 0.0
