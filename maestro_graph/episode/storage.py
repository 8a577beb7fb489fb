"""Where a thread lives on one machine: a SQLite file holding LangGraph's checkpoints (written with Maestro's
serializer, `checkpoint_serde`) and, beside them, a store of the thread's images kept once per content digest
(`image_refs.IMAGE_NAMESPACE`), so a checkpoint holds references instead of the bytes. `maestro ask
--checkpoint-db` and `maestro serve --checkpoint-db FILE` open it here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import TTLConfig
from langgraph.store.sqlite import SqliteStore

from ..core.configs import DEFAULT_CHECKPOINTS_KEPT
from ..errors import ExpertFailure
from ..types import ErrorKind, StopReason

__all__ = ["CHECKPOINT_TYPES", "checkpoint_serde", "image_ttl", "prune_thread", "sqlite_checkpointer",
           "sqlite_image_store"]

CHECKPOINT_TYPES: tuple[tuple[str, str], ...] = tuple(
    (t.__module__, t.__name__) for t in (StopReason, ErrorKind, ExpertFailure))
"""Maestro's own types that checkpoints written before the state held only plain values carry (`stop`, a step's
`error_kind`, a call's `failure`; now their strings, so that the Agent Server's checkpointer, which offers no
msgpack allow-list, reads a thread without warnings); LangGraph's message types are on its built-in allow-list."""


def checkpoint_serde() -> JsonPlusSerializer:
    """The serializer of Maestro's checkpointers (`maestro serve --checkpoint-db`, `maestro ask --checkpoint-db`):
    LangGraph's, with Maestro's older types registered on its msgpack allow-list. The default serializer loads any
    type and warns on stderr, once per type, that unregistered ones will be blocked in a future version; this one
    loads these and LangGraph's safe types, and hands back the raw value of anything else instead of importing it."""
    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES)


def sqlite_checkpointer(path: str | Path) -> SqliteSaver:
    """The checkpointer of the SQLite file at `path` (created with its tables when missing), with Maestro's
    serializer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False), serde=checkpoint_serde())
    saver.setup()
    return saver


def image_ttl(retention_days: float | None) -> TTLConfig | None:
    """The store's TTL settings for images kept `retention_days` after their last read (None: kept for good)."""
    if retention_days is None:
        return None
    return {"default_ttl": retention_days * 24 * 60, "refresh_on_read": True, "sweep_interval_minutes": 60}


def sqlite_image_store(path: str | Path, *, retention_days: float | None = None) -> SqliteStore:
    """The image store in the SQLite file at `path`, beside its checkpoints. With `retention_days`, a stored image
    not read for that long is deleted by a sweeper thread of the store's own (each read renews it; a thread that
    asks about it later is told to send it again)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ttl = image_ttl(retention_days)
    store = SqliteStore(sqlite3.connect(str(path), check_same_thread=False, isolation_level=None), ttl=ttl)
    store.setup()
    if ttl is not None:
        store.start_ttl_sweeper()
    return store


def prune_thread(saver: SqliteSaver, thread_id: str, *, keep: int = DEFAULT_CHECKPOINTS_KEPT) -> int:
    """Delete all but the `keep` latest checkpoints of a thread (and their pending writes) from a SQLite
    checkpointer, so a long thread's file stays bounded; call it between episodes, never while one runs on the
    thread. The file's write-ahead log (SqliteSaver keeps the file in WAL mode) is then copied into the file and
    emptied: every step of an episode appends whole pages to it, so without this it grows by about a third of a
    megabyte per question until SQLite's own checkpoint at 4 MB, and keeps that size. Returns how many checkpoints
    went."""
    with saver.lock:
        with saver.conn:
            gone = _pruned(saver.conn, thread_id, keep)
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # waits (busy timeout) for the image store's writes
    return gone


def _pruned(conn: sqlite3.Connection, thread_id: str, keep: int) -> int:
    gone = conn.execute(
        "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id NOT IN (SELECT checkpoint_id FROM "
        "checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT ?)", (thread_id, thread_id, keep),
    ).rowcount
    conn.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id NOT IN (SELECT checkpoint_id FROM "
                 "checkpoints WHERE thread_id = ?)", (thread_id, thread_id))
    return gone
