#!/usr/bin/env python
"""K items of each domain (or `--by source`) of a task file (optionally leaving some out): a stratified sample small
enough for a CPU run. The first K of each group, or K drawn at random with `--seed`. Written next to the input so the
image paths stay valid, or with `--out` in another folder, where the images it names are copied beside it (a sample
a repository can carry).

    .venv/bin/python scripts/subset_tasks.py runs/bench/train.jsonl --per-domain 6 --exclude small-text
    .venv/bin/python scripts/subset_tasks.py runs/real-dev/test.jsonl --per-domain 4 --by source --seed 7 \\
        --out tests/data/routing/tasks.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--per-domain", type=int, required=True)
    parser.add_argument("--by", choices=["domain", "source"], default="domain", help="the field items are grouped by")
    parser.add_argument("--exclude", action="append", default=[], help="a group to leave out (repeat)")
    parser.add_argument("--seed", type=int, help="draw each group's items at random with this seed (default: the "
                        "first K)")
    parser.add_argument("--out", type=Path, help="default: <tasks stem>-<K>.jsonl beside the input; in another "
                        "folder, the images are copied beside it")
    args = parser.parse_args()
    by_domain: dict[str, list[dict]] = defaultdict(list)
    for line in args.tasks.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_domain[row.get(args.by) or "unknown"].append(row)
    rng = random.Random(args.seed)
    rows = [r for d in sorted(by_domain) if d not in args.exclude
            for r in (by_domain[d][: args.per_domain] if args.seed is None
                      else rng.sample(by_domain[d], min(args.per_domain, len(by_domain[d]))))]
    out = args.out or args.tasks.with_name(f"{args.tasks.stem}-{args.per_domain}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.parent.resolve() != args.tasks.parent.resolve():
        for image in {image for r in rows for image in r["images"]}:
            (out.parent / image).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.tasks.parent / image, out.parent / image)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} items from {len(by_domain) - len(set(args.exclude) & set(by_domain))} {args.by}s -> {out}")


if __name__ == "__main__":
    main()
