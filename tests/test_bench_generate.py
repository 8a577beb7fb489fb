"""The procedural suite: seeds and splits, every domain and its wordings, well-formed exact answers, images that
load, byte-for-byte determinism through the self-check, barcodes that decode to their answer, and the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from maestro_graph.core.tasks import load_tasks
from maestro_graph.operations.bench.cli import bench_app
from maestro_graph.operations.bench.generate import (
    DOMAINS,
    SPLITS,
    check_suite,
    item_seed,
    make_item,
    make_suite,
    split_of_seed,
    suite_seeds,
)
from maestro_graph.operations.bench.generate.suite import answer_problem

MIN_DOMAINS = 8
MIN_WORDINGS = 3
# the small-text images are large on purpose (2-4 megapixels); one per domain keeps this file fast
FAST_DOMAINS = [d for d in DOMAINS if d != "small-text"]


def test_split_seeds_are_disjoint_and_invertible():
    seeds = {split: {item_seed(split, 5, i) for i in range(2000)} for split in SPLITS}
    assert all(len(s) == 2000 for s in seeds.values())
    for a in SPLITS:
        for b in SPLITS:
            if a != b:
                assert not seeds[a] & seeds[b]
        assert {split_of_seed(s) for s in seeds[a]} == {a}
    assert item_seed("train", 0, 0) != item_seed("train", 1, 0)  # other suite seeds give other items


def test_no_two_items_of_a_suite_draw_the_same_random_stream():
    # random.Random(2) and random.Random((1 << 32) | 2) draw the same numbers: val item 2 was train item 2
    assert random.Random(item_seed("train", 0, 2)).random() == random.Random(item_seed("val", 0, 2)).random()
    seeds = suite_seeds(0, 200)
    flat = [s for split in SPLITS for s in seeds[split]]
    assert len({random.Random(s).getrandbits(128) for s in flat}) == len(flat) == 600
    assert seeds["val"][2] != item_seed("val", 0, 2) and seeds["test"][3] != item_seed("test", 0, 3)
    assert all(split_of_seed(s) == split for split in SPLITS for s in seeds[split])
    unchanged = sum(seeds[split][i] == item_seed(split, 0, i) for split in SPLITS for i in range(200))
    assert unchanged == 598  # only the two repeats are redrawn
    assert make_item("geometry-perception", seeds["test"][3]).question  # a redrawn seed makes an item like any other
    with pytest.raises(ValueError, match="unknown split"):
        item_seed("dev", 0, 0)


def test_domains_and_wordings():
    assert len(DOMAINS) >= MIN_DOMAINS
    for name, domain in DOMAINS.items():
        assert domain.questions, name
        for qtype, wordings in domain.questions.items():
            assert len(set(wordings)) >= MIN_WORDINGS, f"{name}/{qtype} has {len(set(wordings))} wordings"


@pytest.mark.parametrize("domain", FAST_DOMAINS)
def test_items_are_valid(domain):
    for i in range(4):
        draft = make_item(domain, 123_000 + i)
        assert draft.qtype in DOMAINS[domain].questions
        assert answer_problem(draft.answer, draft.answer_type, draft.choices, draft.tolerance) is None, draft
        assert draft.question.strip() and draft.question != draft.answer
        if domain == "arithmetic":
            assert draft.images == []
        else:
            assert len(draft.images) == 1 and min(draft.images[0].size) >= 100
        again = make_item(domain, 123_000 + i)
        assert (again.question, again.answer, again.choices) == (draft.question, draft.answer, draft.choices)


def test_wordings_vary_within_a_domain():
    questions = {make_item("document", 9_000 + i).question.split("?")[0] for i in range(30)}
    assert len(questions) >= 6


def test_answer_problems_are_caught():
    assert answer_problem("12", "number", None) is None
    assert answer_problem("twelve", "number", None)
    assert answer_problem("maybe", "yesno", None)
    assert answer_problem("3, 4", "pair", None)
    assert answer_problem("(3, 4)", "pair", None) is None
    assert answer_problem("E", "choice", ["A", "B"])
    assert answer_problem("", "text", None)


def test_barcodes_decode_to_their_answer():
    import zxingcpp

    decoded = 0
    for i in range(12):
        draft = make_item("barcode", 55_000 + i)
        texts = [r.text for r in zxingcpp.read_barcodes(np.asarray(draft.images[0].convert("L")))]
        assert all(t == draft.answer for t in texts), (texts, draft.answer)
        decoded += bool(texts)
    assert decoded >= 9


def test_suite_is_deterministic_complete_and_checks(tmp_path):
    splits = ("train", "test")  # two splits keep this fast; seeds of all three are covered above
    counts = make_suite(tmp_path, len(DOMAINS), 11, splits=splits, progress=False)
    assert counts == {s: len(DOMAINS) for s in splits}
    seeds = set()
    for split in splits:
        tasks, problems = load_tasks(tmp_path / f"{split}.jsonl")
        assert not problems
        assert {t.domain for t in tasks} == set(DOMAINS)
        assert all(t.source == "procedural" and {"qtype", "seed"} <= t.meta.keys() for t in tasks)
        for t in tasks:
            for path in t.images:
                Image.open(path).convert("RGB")
        seeds |= {t.meta["seed"] for t in tasks}
    assert len(seeds) == len(splits) * len(DOMAINS)
    report = check_suite(tmp_path, progress=False)  # re-derives every item: same text and the same image bytes
    assert report.ok, report.problems
    assert report.regenerated == report.items == len(splits) * len(DOMAINS)

    first = json.loads((tmp_path / "test.jsonl").read_text().splitlines()[0])
    first["answer"] = first["answer"] + "1"
    (tmp_path / "train.jsonl").unlink()  # the changed item alone: the check re-derives every item it reads
    (tmp_path / "test.jsonl").write_text(json.dumps(first) + "\n")
    report = check_suite(tmp_path, regenerate=True, progress=False)
    assert not report.ok and any("answer" in p for p in report.problems)


def test_cli_make_and_check(tmp_path):
    runner = CliRunner()
    out = tmp_path / "suite"
    args = ["make", "--out", str(out), "--n", "3", "--seed", "2", "--domains", "table,arithmetic,barcode"]
    result = runner.invoke(bench_app, args)
    assert result.exit_code == 0, result.output
    first = {p.name: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert runner.invoke(bench_app, args).exit_code == 2  # refuses to overwrite without --force
    assert runner.invoke(bench_app, [*args, "--force"]).exit_code == 0
    assert {p.name: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == first  # same bytes twice
    assert runner.invoke(bench_app, ["check", str(out)]).exit_code == 0
    bad = runner.invoke(bench_app, ["make", "--out", str(tmp_path / "x"), "--n", "1", "--domains", "poetry"])
    assert bad.exit_code == 2 and "unknown domain" in bad.output
