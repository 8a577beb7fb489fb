"""`maestro serve --checkpoint-db FILE` (SQLite) keeps each image once in the thread image store,
as the Postgres database does: the door hands the graph references, so no checkpoint, not even a run's input, holds
an image's bytes. Measured on a real loopback server with an uncompressed 1.08 MB PNG resent with every question, by
the scenario `maestro reliability` runs, and a history repeating it through the `openai` client."""

from __future__ import annotations

import sqlite3

import openai
import pytest

from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app
from maestro_graph.operations.reliability.conversation import (
    MB,
    NEW_THREADS_LIMIT_BYTES,
    ONE_THREAD_LIMIT_BYTES,
    RESENT_QUESTIONS,
    big_png_url,
    resent_image_growth,
    sqlite_bytes,
)


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


@pytest.mark.slow  # about 25 s on two busy cores: 40 requests of a 1 MB image through a loopback server
def test_a_resent_image_is_stored_once_on_one_thread_and_across_threads(registry, tmp_path):
    """The scenario `maestro reliability` runs (`resent_image_storage`): 20 questions on one thread, then 20 new
    threads, each resending the image; every answer right, and no checkpoint or write holds a data URL."""
    growth = resent_image_growth(registry, tmp_path / "threads.sqlite")
    assert growth.problems == []
    assert growth.one_thread <= ONE_THREAD_LIMIT_BYTES == 2 * MB and RESENT_QUESTIONS == 20
    assert growth.new_threads <= NEW_THREADS_LIMIT_BYTES == 25 * MB
    assert growth.stored_images == 1 and growth.data_url_blobs == 0


def test_an_image_repeated_across_history_turns_is_stored_once(served):
    db, client = served
    image = big_png_url(shift=40)
    assert len(image) * 3 // 4 > 1_080_000
    history = [m for n in range(8) for m in (_user(f"Question {n} about the picture?", image),
                                            {"role": "assistant", "content": "I do not know."})]
    before = sqlite_bytes(db)
    reply = client.chat.completions.create(model="maestro", extra_body={"thread_id": "history"},
                                           messages=[*history, _user("How many circles are in the image?")])
    grew = sqlite_bytes(db) - before
    assert reply.choices[0].message.content == "7"  # the follow-up read the history's image
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM store").fetchone() == (1,)
    assert grew <= 2 * MB, f"a history repeating a 1.4 MB data URL in 8 turns grew the file by {grew:,} bytes"
