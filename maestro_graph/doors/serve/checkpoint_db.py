"""The database of `--checkpoint-db`: a SQLite file of this replica's own (checkpoints, and the thread images kept
once by content digest beside them), or a Postgres database that several replicas share (checkpoints, and the
leases that let one replica at a time run a thread). Opening it, and what a lost one raises."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from ...episode.storage import checkpoint_serde, image_ttl, prune_thread, sqlite_checkpointer, sqlite_image_store
from ...errors import ServiceUnavailable, import_extra
from .settings import ServeSettings
from .thread_lease import ThreadLeases

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore

__all__ = ["CheckpointDb", "ImageDb", "is_postgres", "open_checkpointer", "open_image_store", "open_leases",
           "prune_finished", "store_errors"]

CheckpointDb: TypeAlias = "SqliteSaver | PostgresSaver"
"""A checkpointer that `open_checkpointer` opens."""
ImageDb: TypeAlias = "SqliteStore | PostgresStore"
"""An image store that `open_image_store` opens."""


class _OnPool(Protocol):
    """What `_set_up` uses of a LangGraph saver or store on a Postgres pool."""

    conn: Any  # psycopg_pool's ConnectionPool

    def setup(self) -> None: ...


_Made = TypeVar("_Made", bound=_OnPool)


def open_checkpointer(location: str | Path) -> CheckpointDb:
    """The checkpointer of `--checkpoint-db`: a `postgresql://` URL is a Postgres database that several replicas
    share (any of them can resume a thread; a pool of connections checked before each use, so one lost while idle is
    replaced), anything else a SQLite file of this replica's own (SqliteSaver serialises the worker threads with its
    own lock). An unreachable database is a ServiceUnavailable naming it."""
    if not is_postgres(location):
        return sqlite_checkpointer(location)
    postgres = import_extra("langgraph.checkpoint.postgres", "postgres", "a Postgres checkpoint database")
    pool_module = import_extra("psycopg_pool", "postgres", "a Postgres checkpoint database")
    from psycopg.rows import dict_row

    pool = pool_module.ConnectionPool(str(location), min_size=1, max_size=_POOL_SIZE, open=False,
                                      timeout=_CONNECT_TIMEOUT_S, check=pool_module.ConnectionPool.check_connection,
                                      kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                                              "connect_timeout": int(_CONNECT_TIMEOUT_S)})
    try:
        pool.open(wait=True, timeout=_CONNECT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - process boundary: any failure to reach the database stops the start
        pool.close()
        raise _unavailable(str(location), "checkpoints", exc) from None
    return _set_up(postgres.PostgresSaver(pool, serde=checkpoint_serde()), str(location), "checkpoints")


def open_image_store(location: str | Path, checkpointer: CheckpointDb, *,
                     retention_days: float | None = None) -> ImageDb:
    """The store that keeps a thread's images once per content digest beside the checkpoints of `--checkpoint-db`
    (its own table in the SQLite file; LangGraph's store tables in the Postgres database, over the pool of
    connections of `checkpointer`, which `open_checkpointer` opened on the same location). With `retention_days`, a
    stored image not read for that long is deleted by the store's sweeper thread (each read renews it)."""
    if not is_postgres(location):
        return sqlite_image_store(location, retention_days=retention_days)
    postgres = import_extra("langgraph.store.postgres", "postgres", "a Postgres checkpoint database")
    store = _set_up(postgres.PostgresStore(checkpointer.conn, ttl=image_ttl(retention_days)), str(location), "images")
    if retention_days is not None:
        store.start_ttl_sweeper()
    return store


def prune_finished(checkpointer: BaseCheckpointSaver, thread_id: str, *, keep: int) -> None:
    """Bound a thread's checkpoints between episodes (never while one runs on it): a SQLite thread keeps its `keep`
    latest, a Postgres one its latest (LangGraph's `prune`, which drops the others' writes and unreferenced blobs)."""
    if isinstance(checkpointer, SqliteSaver):
        prune_thread(checkpointer, thread_id, keep=keep)
    else:
        checkpointer.prune([thread_id], strategy="keep_latest")


def is_postgres(location: str | Path) -> bool:
    """Whether a `--checkpoint-db` names a Postgres database (a URL) rather than a SQLite file."""
    return str(location).startswith(("postgresql://", "postgres://"))


def _set_up(made: _Made, url: str, what: str) -> _Made:
    """`made` (a LangGraph saver or store on a Postgres pool) with its tables set up, under the set-up lock: replicas
    starting together would race on LangGraph's migrations. An unreachable database is a ServiceUnavailable naming
    it and `what` was wanted there (the pool is closed)."""
    try:
        with made.conn.connection() as conn:
            _take_setup_lock(conn)
            try:
                made.setup()
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
    except Exception as exc:  # noqa: BLE001 - process boundary: any failure to reach the database stops the start
        made.conn.close()
        raise _unavailable(url, what, exc) from None
    return made


def _unavailable(url: str, what: str, exc: Exception) -> ServiceUnavailable:
    return ServiceUnavailable(f"Postgres ({what})", _redacted(url), str(exc).splitlines()[0] if str(exc)
                              else exc.__class__.__name__)


def _take_setup_lock(conn) -> None:
    """Take the set-up lock by polling, never by a blocking `pg_advisory_lock`: a statement waiting for the lock holds
    a snapshot, LangGraph's migrations build their indexes CONCURRENTLY, and that waits for every open snapshot, so
    the holder's set-up would wait for the waiter forever (Postgres sees no cycle: the lock is held by the holder's
    other, idle connection). Between tries this connection is idle and holds none."""
    deadline = time.monotonic() + _SETUP_WAIT_S
    while not conn.execute("SELECT pg_try_advisory_lock(%s) AS taken", (_SETUP_LOCK,)).fetchone()["taken"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"another replica held the checkpoint set-up lock for over {_SETUP_WAIT_S:g} s")
        time.sleep(0.1)


_POOL_SIZE = 8
"""Connections a replica holds to the checkpoint database (its episode workers share them)."""
_SETUP_LOCK = 0x6D61657374726F00
"""The advisory-lock key that serialises the checkpoint tables' set-up across replicas ("maestro" in ASCII)."""
_SETUP_WAIT_S = 120.0
"""How long a replica waits for another one's set-up of the checkpoint tables (migrations take well under a second)."""
_CONNECT_TIMEOUT_S = 5.0
"""How long connecting, or waiting for a pooled connection, may take before the database counts as lost."""


def _redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}://{credentials.split(':')[0]}{at}{host}" if at else url


def store_errors(checkpointer: BaseCheckpointSaver | None) -> tuple[type[BaseException], ...]:
    """What a lost checkpoint database raises: a request that meets one is refused with a retryable 503, and its
    thread, whose last committed step is in the database, resumes on a retry (Postgres only: a SQLite file does not
    go away)."""
    if checkpointer is None or not type(checkpointer).__module__.startswith("langgraph.checkpoint.postgres"):
        return ()
    import psycopg
    import psycopg_pool

    return psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout


def open_leases(checkpointer: BaseCheckpointSaver | None, settings: ServeSettings) -> ThreadLeases | None:
    """Thread leases in a Postgres checkpoint database, which several replicas share. A SQLite file is one
    replica's own, so the in-process rule (`_busy_threads`) is all it needs."""
    location = str(settings.checkpoint_db or "")
    if checkpointer is None or not is_postgres(location):
        return None
    try:
        return ThreadLeases(location, lease_s=settings.thread_lease_s, connect_timeout_s=_CONNECT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - process boundary: any failure to reach the database stops the start
        raise _unavailable(location, "thread leases", exc) from None
