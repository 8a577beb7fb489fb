"""How a `--checkpoint-db` SQLite file grows when one thread is asked many questions: the thread's first question
sends an image as a data URL (as an OpenAI client does), the others are follow-ups about it (no image), each a new
episode of the packaged registry and the shipped policy, checkpointed as `maestro serve` checkpoints them (a
`sync` write per step). Expert calls go through a cache folder, so the follow-ups are cheap and only the thread's
storage is measured.

    .venv/bin/python scripts/thread_growth.py                      # 1,000 questions, keep 32 episodes, 16 checkpoints
    .venv/bin/python scripts/thread_growth.py --questions 200 --checkpoints-kept 0   # every checkpoint kept

Prints one JSON object: the database's bytes after every `--every` questions, and the mean growth per question
over the first and the last block.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from maestro_graph.cache.store import ExpertCache
from maestro_graph.core.configs import DEFAULT_CHECKPOINTS_KEPT, DEFAULT_EPISODES_KEPT
from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.storage import prune_thread, sqlite_checkpointer, sqlite_image_store
from maestro_graph.images.load import image_to_data_url, load_image
from maestro_graph.operations.reliability.traffic import database_bytes
from maestro_graph.policy import make_policy
from maestro_graph.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
FOLLOW_UPS = ("Are there more than {n} circles?", "Are there fewer than {n} circles?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--episodes-kept", type=int, default=DEFAULT_EPISODES_KEPT)
    parser.add_argument("--checkpoints-kept", type=int, default=DEFAULT_CHECKPOINTS_KEPT,
                        help="prune the thread to this many checkpoints after each question, as `maestro serve` "
                        "does (0: keep all)")
    parser.add_argument("--every", type=int, default=100, help="measure after every this many questions")
    parser.add_argument("--image", type=Path, default=ROOT / "examples" / "circles.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "threads.sqlite"
        registry = Registry.load(cache=ExpertCache(Path(folder) / "cache"))
        saver = sqlite_checkpointer(db)
        graph = build_graph(registry, make_policy("neural"), checkpointer=saver, store=sqlite_image_store(db))
        config = {"configurable": {"thread_id": "long"}, "recursion_limit": 40}
        context = MaestroContext(episodes_kept=args.episodes_kept)
        image = image_to_data_url(load_image(str(args.image)))
        sizes = {0: database_bytes(db)}
        for i in range(args.questions):
            payload = {"question": "How many circles are in the image?", "images": [image]} if i == 0 else {
                "question": FOLLOW_UPS[i % 2].format(n=i % 9 + 1), "images": []}
            out = graph.invoke(payload, config, context=context, durability="sync")
            assert out.get("answer") is not None, out.get("stop_reason")
            if args.checkpoints_kept:
                prune_thread(saver, "long", keep=args.checkpoints_kept)
            if (i + 1) % args.every == 0:
                sizes[i + 1] = database_bytes(db)
                print(f"{i + 1} questions: {sizes[i + 1]:,} bytes", file=sys.stderr, flush=True)
        marks = sorted(sizes)
        first, last = (marks[0], marks[1]), (marks[-2], marks[-1])
        print(json.dumps({
            "questions": args.questions, "episodes_kept": args.episodes_kept,
            "checkpoints_kept": args.checkpoints_kept, "image_bytes": len(image),
            "database_bytes": sizes,
            "bytes_per_question_first_block": round((sizes[first[1]] - sizes[first[0]]) / (first[1] - first[0])),
            "bytes_per_question_last_block": round((sizes[last[1]] - sizes[last[0]]) / (last[1] - last[0])),
        }, indent=2))


if __name__ == "__main__":
    main()
