"""Rephrase the counting items of a task file, to measure whether a counting question is answered however it is
phrased: each item that asks "How many <things> ..." with a whole-number answer becomes

- a statement question: "Which statement is true?" with four options "There are N <things>" (the true count among
  them; "There are no <things>" for 0), written in the question as "A. ...; B. ..." in a shuffled order;
- a yes/no comparison, one of "Is the number of <things> greater than K?", "Are there more than K <things> in the
  image?", "Are there fewer than K <things> in the image?", "Are there exactly K <things> in the image?", with K
  drawn so that about half the answers are yes.

Everything is drawn from a digest of the item's id, so the same input file always gives the same rephrasings. A task
file's images must lie in its own folder, so the images used are copied into `images/` next to the output file
(write it under `runs/`, never into the package).

    .venv/bin/python scripts/rephrase_counting.py REAL_DEV_TASKS.jsonl \
        --out runs/rephrased-counting/tasks.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
from pathlib import Path

_HOW_MANY = re.compile(r"^how many ([a-z]+(?: [a-z]+)?) (?:are|is) (?:there )?in the (?:image|picture|figure)",
                       re.IGNORECASE)
_LABELS = "ABCD"


def _rng(task_id: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big"))


def _statement(count: int, things: str) -> str:
    return f"There are no {things}" if count == 0 else f"There are {count} {things}"


def statements(task: dict, things: str, count: int, rng: random.Random) -> dict:
    """The statement question: the true count and three other counts near it, shuffled."""
    others = [n for n in range(max(0, count - 4), count + 5) if n != count]
    counts = [count, *rng.sample(others, 3)]
    rng.shuffle(counts)
    options = [_statement(n, things) for n in counts]
    listed = "; ".join(f"{label}. {option}" for label, option in zip(_LABELS, options))
    return {**_base(task, "statements"), "question": f"Which statement is true? {listed}",
            "answer": _statement(count, things), "answer_type": "choice"}


def comparison(task: dict, things: str, count: int, rng: random.Random) -> dict:
    """A yes/no comparison with a threshold drawn near the count (yes and no about equally often)."""
    kind = rng.choice(["greater", "more", "fewer", "exactly"])
    if kind == "exactly":
        k = count if rng.random() < 0.5 else rng.choice([n for n in (count - 1, count + 1) if n >= 0])
        return {**_base(task, "exactly"), "question": f"Are there exactly {k} {things} in the image?",
                "answer": "Yes" if count == k else "No", "answer_type": "yesno"}
    k = max(0, count + rng.choice([-2, -1, 1, 2]))
    if kind == "fewer":
        question, truth = f"Are there fewer than {k} {things} in the image?", count < k
    elif kind == "more":
        question, truth = f"Are there more than {k} {things} in the image?", count > k
    else:
        question, truth = f"Is the number of {things} greater than {k}?", count > k
    return {**_base(task, kind), "question": question, "answer": "Yes" if truth else "No", "answer_type": "yesno"}


def _base(task: dict, form: str) -> dict:
    return {"id": f"{task['id']}-{form}", "images": task["images"], "choices": None, "tolerance": 0.0,
            "source": f"{task.get('source', 'tasks')}-rephrased", "domain": task.get("domain"),
            "meta": {"from": task["id"], "form": form}}


def rephrase(path: Path, out_dir: Path) -> list[dict]:
    """The rephrased items of the task file at `path`; their images are copied into `out_dir/images/`."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        task = json.loads(line)
        match = _HOW_MANY.match(task.get("question", ""))
        answer = str(task.get("answer", "")).strip("{} ")
        if not match or not answer.isdigit() or task.get("choices"):
            continue
        task = {**task, "images": [_copy(path.parent / image, out_dir) for image in task["images"]]}
        rng = _rng(task["id"])
        things, count = match.group(1).lower(), int(answer)
        out += [statements(task, things, count, rng), comparison(task, things, count, rng)]
    return out


def _copy(image: Path, out_dir: Path) -> str:
    """Copy an image into `out_dir/images/` (named by its content digest) and return its path relative to out_dir."""
    data = image.read_bytes()
    name = f"images/{hashlib.sha256(data).hexdigest()[:16]}{image.suffix}"
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    if not (out_dir / name).exists():
        shutil.copyfile(image, out_dir / name)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", type=Path, help="a task file (JSONL) with counting items")
    parser.add_argument("--out", type=Path, required=True, help="the rephrased task file to write")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    items = rephrase(args.tasks, args.out.parent)
    args.out.write_text("".join(json.dumps(item) + "\n" for item in items))
    print(f"{len(items)} rephrased items from {args.tasks} -> {args.out}")


if __name__ == "__main__":
    main()
