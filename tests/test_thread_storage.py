"""A thread's checkpoints grow by a bounded amount per question. Its images are stored once by
content digest beside the checkpoints (a follow-up still sees them), its history keeps the latest
`episodes_kept` episodes, and the checkpoints of finished episodes are pruned to the latest few."""

from __future__ import annotations

import sqlite3

from servers import EXAMPLES, data_url

from maestro_graph.episode.context import MaestroContext
from maestro_graph.episode.graph import build_graph
from maestro_graph.episode.image_refs import IMAGE_REF
from maestro_graph.episode.runner import run_episode
from maestro_graph.episode.storage import prune_thread, sqlite_checkpointer, sqlite_image_store
from maestro_graph.policy import make_policy


def test_a_long_thread_stores_its_image_once_and_keeps_a_bounded_history(registry, tmp_path):
    db = tmp_path / "threads.sqlite"
    saver = sqlite_checkpointer(db)
    graph = build_graph(registry, make_policy("fixed:opencv-vision@@counting"), checkpointer=saver,
                        store=sqlite_image_store(db))
    config, context = {"configurable": {"thread_id": "long"}}, MaestroContext(episodes_kept=2)
    image = data_url(EXAMPLES / "circles.png")
    answers = [run_episode(graph, "How many circles are in the image?", [image], config=config,
                           context=context).answer]
    for n in range(3, 7):
        answers.append(run_episode(graph, f"Are there more than {n} circles?", [], config=config,
                                   context=context).answer)
        assert prune_thread(saver, "long", keep=3) > 0
    assert answers == ["7", "Yes", "Yes", "Yes", "Yes"]  # every follow-up read the stored image
    values = graph.get_state(config).values
    assert [e["question"] for e in values["episodes"]] == ["Are there more than 5 circles?",
                                                           "Are there more than 6 circles?"]
    assert values["images"][0].startswith(IMAGE_REF) and values["thread_images"] == values["images"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'long'").fetchone() == (3,)
        blobs = [bytes(r[0]) for r in conn.execute("SELECT checkpoint FROM checkpoints")]
        blobs += [bytes(r[0]) for r in conn.execute("SELECT value FROM writes")]
        stored = conn.execute("SELECT count(*) FROM store").fetchone()
    assert stored == (1,) and not any(image[-200:].encode() in blob for blob in blobs)
