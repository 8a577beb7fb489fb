#!/usr/bin/env python
"""The first K items of each domain (or `--by source`) of a task file (optionally leaving some out), written next to
it so the image paths stay valid: a stratified sample small enough for a CPU run.

    .venv/bin/python scripts/subset_tasks.py runs/bench/train.jsonl --per-domain 6 --exclude small-text
    .venv/bin/python scripts/subset_tasks.py runs/real-dev/test.jsonl --per-domain 6 --by source
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--per-domain", type=int, required=True)
    parser.add_argument("--by", choices=["domain", "source"], default="domain", help="the field items are grouped by")
    parser.add_argument("--exclude", action="append", default=[], help="a group to leave out (repeat)")
    parser.add_argument("--out", type=Path, help="default: <tasks stem>-<K>.jsonl beside the input")
    args = parser.parse_args()
    by_domain: dict[str, list[dict]] = defaultdict(list)
    for line in args.tasks.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_domain[row.get(args.by) or "unknown"].append(row)
    rows = [r for d in sorted(by_domain) if d not in args.exclude for r in by_domain[d][: args.per_domain]]
    out = args.out or args.tasks.with_name(f"{args.tasks.stem}-{args.per_domain}.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} items from {len(by_domain) - len(set(args.exclude) & set(by_domain))} {args.by}s -> {out}")


if __name__ == "__main__":
    main()
