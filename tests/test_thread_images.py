"""Issue 58, item 2: `maestro serve --checkpoint-db FILE` (SQLite) keeps each image once in the thread image store,
as the Postgres database does: the door hands the graph references, so no checkpoint, not even a run's input, holds
an image's bytes. Measured through the `openai` client on a real loopback server with an uncompressed 1.08 MB PNG
resent with every question."""

from __future__ import annotations

import base64
import io
import sqlite3
from pathlib import Path

import openai
import pytest
from PIL import Image
from servers import EXAMPLES

from maestro_graph.serve import ServeSettings, create_app
from maestro_graph.serve.loopback import running_app

MB = 1_000_000
QUESTIONS = 20


def _big_png(shift: int = 0) -> str:
    """The example circles at 600x600, stored uncompressed: a 1.08 MB PNG that is quick to count."""
    image = Image.open(EXAMPLES / "circles.png").convert("RGB").resize((600, 600))
    if shift:
        image = image.rotate(0, translate=(shift, 0), fillcolor=(255, 255, 255))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=0)
    assert len(out.getvalue()) > 1_080_000
    return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode()}"


def _size(db: Path) -> int:
    """The database's bytes on disk: the file and its write-ahead log."""
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def _ask(client: openai.OpenAI, messages: list[dict], thread_id: str | None = None):
    return client.chat.completions.create(model="maestro", messages=messages,
                                          extra_body={"thread_id": thread_id} if thread_id else None)


def _user(text: str, image: str | None = None) -> dict:
    parts = [{"type": "text", "text": text}]
    return {"role": "user", "content": parts + ([{"type": "image_url", "image_url": {"url": image}}] if image else [])}


@pytest.fixture()
def served(registry, tmp_path):
    db = tmp_path / "threads.sqlite"
    settings = ServeSettings(checkpoint_db=db, policy="count", policies=("count=fixed:opencv-vision@@counting",),
                             max_body_bytes=30 * MB, max_image_bytes=2 * MB, request_timeout_s=120)
    with running_app(create_app(registry, settings)) as url:
        yield db, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_resent_image_is_stored_once_on_one_thread_and_across_threads(served):
    db, client = served
    image = _big_png()
    empty = _size(db)
    assert _ask(client, [_user("How many circles are in the image?", image)], "one").choices[0].message.content == "7"
    for n in range(1, QUESTIONS):
        reply = _ask(client, [_user(f"Are there more than {n} circles?", image)], "one")
        assert reply.choices[0].message.content == ("Yes" if n < 7 else "No")
    one_thread = _size(db) - empty  # the image stored once (1.44 MB as a data URL), and 20 episodes' checkpoints
    for _ in range(QUESTIONS):
        assert _ask(client, [_user("How many circles are in the image?", image)]).choices[0].message.content == "7"
    new_threads = _size(db) - empty - one_thread
    assert one_thread <= 2 * MB, f"{QUESTIONS} questions on one thread grew the file by {one_thread:,} bytes"
    assert new_threads <= 25 * MB, f"{QUESTIONS} new threads grew the file by {new_threads:,} bytes"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM store").fetchone() == (1,)
        blobs = [bytes(r[0]) for r in conn.execute("SELECT checkpoint FROM checkpoints")]
        blobs += [bytes(r[0]) for r in conn.execute("SELECT value FROM writes")]
    assert not any(b"data:image" in blob for blob in blobs)


def test_an_image_repeated_across_history_turns_is_stored_once(served):
    db, client = served
    image = _big_png(shift=40)
    history = [m for n in range(8) for m in (_user(f"Question {n} about the picture?", image),
                                            {"role": "assistant", "content": "I do not know."})]
    before = _size(db)
    reply = _ask(client, [*history, _user("How many circles are in the image?")], "history")
    grew = _size(db) - before
    assert reply.choices[0].message.content == "7"  # the follow-up read the history's image
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM store").fetchone() == (1,)
    assert grew <= 2 * MB, f"a history repeating a 1.4 MB data URL in 8 turns grew the file by {grew:,} bytes"
