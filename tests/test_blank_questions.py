"""Blank means blank to a reader (no space, format or filler character is a
question); a blank question with an image is read from the image, as the episode's first step, and routed on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont
from typer.testing import CliRunner

from maestro_graph.core.question_text import EMPTY_QUESTION, is_blank
from maestro_graph.doors.cli import app
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.runner import run_episode
from maestro_graph.policy import make_policy

INVISIBLE = "\u200b\u2060\u3164\u200d\u180e \u00a0\u3000\ufeff\u2800\ufe0f"
"""Zero-width space, word joiner, Hangul filler, zero-width joiner, Mongolian vowel separator, spaces, BOM, the
blank braille pattern, a variation selector: what hostile clients send as questions."""


def written_question(folder: Path, text: str = "What is 17 * 23?") -> str:
    """A picture of a question and nothing else (as MathVerse's "vision only" items are)."""
    image = Image.new("RGB", (520, 120), "white")
    ImageDraw.Draw(image).text((20, 30), text, fill="black", font=ImageFont.load_default(size=44))
    path = folder / "question.png"
    image.save(path)
    return str(path)


@pytest.mark.parametrize("text, blank", [(INVISIBLE, True), ("", True), (" \n\t", True), (INVISIBLE + "?", False),
                                         ("\u200bHow many?", False), ("数", False)])
def test_blank_means_nothing_left_to_read(text, blank):
    assert is_blank(text) is blank


def test_a_blank_question_is_read_from_the_image_then_routed(registry, tmp_path):
    """The text read from the picture is the question every later step answers: the arithmetic skill computes the
    calculation it was never sent as text. (Which skill a policy picks for it is the policy's.)"""
    policy = make_policy("fixed:sympy@@arithmetic")
    result = run_episode(build_graph(registry, policy), INVISIBLE, [written_question(tmp_path)])
    assert [s.skill for s in result.steps] == ["ocr", "arithmetic"], result.steps
    assert result.steps[0].evidence == "What is 17 * 23?" and result.steps[0].answer is None
    assert result.answer == "391"


def test_the_cli_reads_a_blank_question_from_its_image_and_refuses_one_without(tmp_path):
    runner = CliRunner()
    read = runner.invoke(app, ["ask", "\u200b\u2060", "--image", written_question(tmp_path), "--json",
                               "--policy", "fixed:sympy@@arithmetic"])
    assert read.exit_code == 0, read.output
    assert json.loads(read.output)["answer"] == "391"
    refused = runner.invoke(app, ["ask", INVISIBLE])
    assert refused.exit_code == 2 and EMPTY_QUESTION in " ".join(refused.output.split())
