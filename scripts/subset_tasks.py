#!/usr/bin/env python
"""The first K items of each domain of a task file (optionally leaving domains out), written next to it so the
image paths stay valid.

    .venv/bin/python scripts/subset_tasks.py runs/bench/train.jsonl --per-domain 6 --exclude small-text
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
    parser.add_argument("--exclude", action="append", default=[], help="a domain to leave out (repeat)")
    parser.add_argument("--out", type=Path, help="default: <tasks stem>-<K>.jsonl beside the input")
    args = parser.parse_args()
    by_domain: dict[str, list[dict]] = defaultdict(list)
    for line in args.tasks.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_domain[row.get("domain") or "unknown"].append(row)
    rows = [r for d in sorted(by_domain) if d not in args.exclude for r in by_domain[d][: args.per_domain]]
    out = args.out or args.tasks.with_name(f"{args.tasks.stem}-{args.per_domain}.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} items from {len(by_domain) - len(set(args.exclude) & set(by_domain))} domains -> {out}")


if __name__ == "__main__":
    main()
