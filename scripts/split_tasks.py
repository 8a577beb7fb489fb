#!/usr/bin/env python
"""Split a task file into train/test halves by a hash of each item's id (stable, no seed to remember). The images
are linked (hard links, else copies) next to the halves, so their paths stay relative to the task files.

    .venv/bin/python scripts/split_tasks.py REAL_DEV_TASKS.jsonl --out $DEV --test-share 0.5

(REAL_DEV_TASKS.jsonl: any task file, e.g. the real dev items; docs/evaluation.md "The real dev items".)

A half can be split again (a validation part of the train half) with another --salt: without one, every item of the
train half hashes above the first split's threshold and would land on the same side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path


def _link(source: Path, target: Path) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--out", required=True, type=Path, help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--test-share", type=float, default=0.5)
    parser.add_argument("--salt", default="", help="text hashed before each id (another salt, another split)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.tasks.resolve().parent
    counts = {"train": 0, "test": 0}
    with (args.out / "train.jsonl").open("w") as train, (args.out / "test.jsonl").open("w") as test:
        for line in args.tasks.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            for rel in row.get("images", []):
                _link(base / rel, args.out / rel)
            bucket = int(hashlib.sha256((args.salt + str(row["id"])).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
            split = "test" if bucket < args.test_share else "train"
            counts[split] += 1
            (test if split == "test" else train).write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{counts['train']} train, {counts['test']} test -> {args.out}")


if __name__ == "__main__":
    main()
