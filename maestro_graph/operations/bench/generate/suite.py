"""Seeds, splits, writing a suite to disk, and checking a written suite against its generators.

An item is a pure function of (domain, item seed). Item seeds pack (suite seed, split, index) into one integer,
`((seed * 3 + split) << 32) | index`, so different splits (and different suite seeds) never share an item seed, and
the split an item came from can be read back from its seed. Distinct seeds are not enough, though: `random.Random`
seeds Mersenne Twister from the integer's 32-bit words, adding word j plus j, so the key [i] (seed i) and the key
[i, i - 1] (seed ((i - 1) << 32) | i) start the same stream, and suite seed 0 made val item 2 a copy of train item 2
and test item 3 a copy of train item 3. `suite_seeds` therefore redraws an item whose stream was already drawn in
the suite from the next redraw seed of its own split (index + k * 2**24)."""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from ....core.tasks import load_tasks
from ....numbers import parse_number
from ....scoring import normalize_text, score
from .base import Draft
from .registry import DOMAINS

__all__ = ["SPLITS", "SOURCE", "item_seed", "split_of_seed", "suite_seeds", "make_item", "make_suite", "check_suite",
           "CheckReport", "answer_problem"]

SPLITS = ("train", "val", "test")
SOURCE = "procedural"
_INDEX_BITS = 32
_REDRAW = 1 << 24
"""Redraw k of item `index` uses index + k * _REDRAW: suites hold fewer than 2**24 items per split."""
_PAIR_RE = re.compile(r"^\(\s*-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*\)$")


def item_seed(split: str, seed: int, index: int) -> int:
    """The seed of item `index` of `split` in the suite made with `seed` (injective in all three)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if seed < 0 or not 0 <= index < 1 << _INDEX_BITS:
        raise ValueError(f"seed must be >= 0 and index in [0, 2**{_INDEX_BITS}); got seed={seed}, index={index}")
    return ((seed * len(SPLITS) + SPLITS.index(split)) << _INDEX_BITS) | index


def split_of_seed(seed: int) -> str:
    return SPLITS[(seed >> _INDEX_BITS) % len(SPLITS)]


def _stream(seed: int) -> int:
    """The first 128 bits a seed's stream draws: equal for equal streams, and a clash of different ones is out of
    reach (2**-128)."""
    return random.Random(seed).getrandbits(128)


def suite_seeds(seed: int, n: int) -> dict[str, list[int]]:
    """The item seeds of a suite, split by split in `SPLITS` order: item `index` takes `item_seed(split, seed,
    index)` unless that seed starts a random stream an earlier item of the suite already drew, in which case it takes
    the first redraw seed that starts a new one."""
    if not 0 < n < _REDRAW:
        raise ValueError(f"n must be in [1, {_REDRAW}); got {n}")
    drawn: set[int] = set()
    seeds: dict[str, list[int]] = {}
    for split in SPLITS:
        seeds[split] = []
        for index in range(n):
            for redraw in range((1 << _INDEX_BITS) // _REDRAW):
                chosen = item_seed(split, seed, index + redraw * _REDRAW)
                stream = _stream(chosen)
                if stream not in drawn:
                    break
            drawn.add(stream)
            seeds[split].append(chosen)
    return seeds


def make_item(domain: str, seed: int) -> Draft:
    """Generate one item of `domain` from its seed."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {', '.join(DOMAINS)}")
    return DOMAINS[domain].make(random.Random(seed))


JPEG_QUALITY = 92


def _encode(image: Image.Image) -> bytes:
    """JPEG at high quality without chroma subsampling: noisy renders stay small (PNG of noise is not), thin
    coloured lines stay crisp, and the bytes are the same on every run with the same libjpeg."""
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=JPEG_QUALITY, subsampling=0)
    return buf.getvalue()


def make_suite(out: Path, n: int, seed: int, *, domains: list[str] | None = None, splits: tuple[str, ...] = SPLITS,
               progress: bool = True) -> dict[str, int]:
    """Write `n` items per split to `out/<split>.jsonl` with images under `out/images/`; domains take turns, so each
    split holds every domain when n >= the number of domains. Returns the item count per split."""
    names = list(domains or DOMAINS)
    unknown = [d for d in names if d not in DOMAINS]
    if unknown:
        raise ValueError(f"unknown domain(s) {unknown}; expected some of {', '.join(DOMAINS)}")
    out = Path(out)
    images = out / "images"
    if images.exists():
        shutil.rmtree(images)  # stale images of an earlier, larger suite would otherwise linger
    images.mkdir(parents=True)
    counts: dict[str, int] = {}
    seeds = suite_seeds(seed, n)
    bar = tqdm(total=n * len(splits), desc="bench make", unit="item", disable=not progress)
    for split in splits:
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for index in range(n):
                domain = names[index % len(names)]
                s = seeds[split][index]
                draft = make_item(domain, s)
                item_id = f"{split}-{index:05d}"
                paths = []
                for k, image in enumerate(draft.images):
                    rel = f"images/{item_id}-{k}.jpg"
                    (out / rel).write_bytes(_encode(image))
                    paths.append(rel)
                fh.write(json.dumps(_record(item_id, draft, paths, domain, s), ensure_ascii=False) + "\n")
                bar.update(1)
                bar.set_postfix_str(f"{split}:{domain}")
        counts[split] = n
    bar.close()
    return counts


def _record(item_id: str, draft: Draft, paths: list[str], domain: str, seed: int) -> dict:
    return {
        "id": item_id, "question": draft.question, "images": paths, "choices": draft.choices,
        "answer": draft.answer, "answer_type": draft.answer_type, "tolerance": draft.tolerance,
        "source": SOURCE, "domain": domain, "meta": {"qtype": draft.qtype, "seed": seed},
    }


def answer_problem(answer: str | None, answer_type: str, choices: list[str] | None,
                   tolerance: float | None = None) -> str | None:
    """Why a stored answer is malformed for its type, or None when it is well-formed and scores 1 against itself."""
    if answer is None or not str(answer).strip():
        return "empty answer"
    if answer_type == "number" and parse_number(answer) is None:
        return f"number answer {answer!r} does not parse as a number"
    if answer_type == "yesno" and normalize_text(answer) not in ("yes", "no"):
        return f"yes/no answer {answer!r} is neither"
    if answer_type == "pair" and not _PAIR_RE.match(answer.strip()):
        return f"pair answer {answer!r} is not '(a, b)'"
    if answer_type == "choice":
        if not choices or len(set(choices)) != len(choices):
            return "choice item without distinct choices"
        if answer not in choices:
            return f"choice answer {answer!r} is not one of {choices}"
    if score(answer, answer, answer_type, tolerance=tolerance, choices=choices) != 1.0:
        return f"the scorer rejects the answer {answer!r} against itself"
    return None


@dataclass
class CheckReport:
    """What `check_suite` found: items read, items re-derived from their seed and matching, and every problem."""

    items: int = 0
    regenerated: int = 0
    per_split: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_suite(folder: Path, *, regenerate: bool = True, progress: bool = True) -> CheckReport:
    """Validate a written suite: task-file format, answers well-formed per answer type, seeds unique and in their
    split's range, and (with `regenerate`) each item re-derived from its seed: same question, answer, choices,
    tolerance, question type and image bytes."""
    folder = Path(folder)
    report = CheckReport()
    seen: dict[int, str] = {}
    streams: dict[int, str] = {}
    files = [(split, folder / f"{split}.jsonl") for split in SPLITS if (folder / f"{split}.jsonl").is_file()]
    if not files:
        report.problems.append(f"{folder}: no {', '.join(s + '.jsonl' for s in SPLITS)} found")
        return report
    for split, path in files:
        tasks, bad = load_tasks(path)
        report.problems += [f"{p.file}:{p.line} ({p.id}): {p.error}" for p in bad]
        report.per_split[split] = len(tasks)
        for task in tqdm(tasks, desc=f"bench check {split}", unit="item", disable=not progress):
            report.items += 1
            where = f"{split}/{task.id}"
            problem = answer_problem(task.answer, task.answer_type, task.choices, task.tolerance)
            if problem:
                report.problems.append(f"{where}: {problem}")
            seed = task.meta.get("seed")
            if not isinstance(seed, int) or task.domain not in DOMAINS or "qtype" not in task.meta:
                report.problems.append(f"{where}: meta needs an integer seed and a qtype, and a known domain")
                continue
            stream = _stream(seed)
            if seed in seen:
                report.problems.append(f"{where}: seed {seed} already used by {seen[seed]}")
            elif stream in streams:
                report.problems.append(f"{where}: seed {seed} starts the same random stream as {streams[stream]}"
                                       " (the same item; `bench make` now redraws such items)")
            seen[seed] = where
            streams.setdefault(stream, where)
            if split_of_seed(seed) != split:
                report.problems.append(f"{where}: seed {seed} belongs to split {split_of_seed(seed)!r}")
            if regenerate:
                mismatch = _mismatch(task, make_item(task.domain, seed))
                if mismatch:
                    report.problems.append(f"{where}: regenerated item differs in {mismatch}")
                else:
                    report.regenerated += 1
    return report


def _mismatch(task, draft: Draft) -> str | None:
    """The first field in which a stored item differs from its regeneration, or None."""
    stored = {"question": task.question, "answer": task.answer, "answer_type": task.answer_type,
              "choices": task.choices, "tolerance": task.tolerance, "qtype": task.meta.get("qtype")}
    fresh = {"question": draft.question, "answer": draft.answer, "answer_type": draft.answer_type,
             "choices": draft.choices, "tolerance": draft.tolerance, "qtype": draft.qtype}
    for key, value in stored.items():
        if value != fresh[key]:
            return f"{key}: stored {value!r}, generated {fresh[key]!r}"
    if len(task.images) != len(draft.images):
        return f"images: {len(task.images)} stored, {len(draft.images)} generated"
    for path, image in zip(task.images, draft.images):
        if hashlib.sha256(Path(path).read_bytes()).digest() != hashlib.sha256(_encode(image)).digest():
            return f"image bytes of {Path(path).name}"
    return None
