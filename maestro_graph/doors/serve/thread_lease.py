"""Thread leases in the Postgres checkpoint database, so that a thread runs on one `maestro serve` replica at a time.

A lease is a session-level advisory lock that the replica's lease connection holds while the thread's episode runs.
Why a lock of a session and not a lease row with an expiry: the lock goes the moment its holder goes, so a killed
replica's closed connection hands its threads over at once instead of after an expiry, and it never expires under a
holder that is alive but slow, where a lease row would let a second replica run the same step beside it. A holder
whose host vanishes without closing its connection is found by the database's TCP keepalives, set on the lease
session so that its locks go within `lease_s`. The replica pings its lease connection every `lease_s / 3`: a lost
connection took its locks with it, so every episode that held one is cancelled (it stops at its next step rather
than run beside the replica that takes its thread over).

Limits: the lease connection must reach Postgres itself or a session-mode pooler (a transaction-mode PgBouncer
hands sessions around and so would hand the locks around); a replica that hangs without dying keeps its threads
until it is killed (a liveness probe on /healthz does that).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from ...errors import import_extra

__all__ = ["APPLICATION_NAME", "Lease", "ThreadLeases", "lease_key"]

log = logging.getLogger("maestro.serve")

APPLICATION_NAME = "maestro-thread-leases"
"""The `application_name` of lease connections: `pg_stat_activity` and `pg_locks` show which backends hold threads."""
_KEY_NAMESPACE = b"maestro-thread"
_KEEPALIVE_PROBES = 2


@dataclass
class Lease:
    """A thread this replica holds. When the lease is lost, `cancel` (the episode's cancellation event) is set and
    `lost` is true, so the episode stops and its request is answered as interrupted, not as finished."""

    thread_id: str
    cancel: threading.Event
    lost: bool = False


def lease_key(thread_id: str) -> int:
    """The advisory-lock key of a thread: 64 bits of a hash personalised for Maestro, so locks other applications
    take in the same database do not meet ours (two thread ids sharing a key would only take turns)."""
    digest = hashlib.blake2b(thread_id.encode(), digest_size=8, person=_KEY_NAMESPACE).digest()
    return int.from_bytes(digest, "big", signed=True)


class ThreadLeases:
    """The leases of one replica, all held by one dedicated connection (a lease is a quick round trip; the lock
    serialises them with the heartbeat). Connects at once, so an unreachable database stops the start; afterwards a
    lost connection is reconnected on the next `try_acquire`, whose psycopg error the caller reports as retryable."""

    def __init__(self, url: str, *, lease_s: int, connect_timeout_s: float):
        self._psycopg = import_extra("psycopg", "postgres", "thread leases in a Postgres checkpoint database")
        self._errors = (self._psycopg.OperationalError, self._psycopg.InterfaceError)
        self._url = url
        self._lease_s = lease_s
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._held: dict[str, Lease] = {}
        self._conn: Any = self._connect()
        self._closing = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="maestro-thread-leases", daemon=True)
        self._heartbeat.start()

    def _connect(self) -> Any:
        """A connection whose session the database drops within `lease_s` of the last word from this host (server
        keepalives), and which notices within `lease_s` that the database is gone (client keepalives)."""
        probe = max(1, self._lease_s // (_KEEPALIVE_PROBES + 1))
        conn = self._psycopg.connect(
            self._url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout_s)),
            application_name=APPLICATION_NAME, keepalives=1, keepalives_idle=probe, keepalives_interval=probe,
            keepalives_count=_KEEPALIVE_PROBES, tcp_user_timeout=self._lease_s * 1000)
        conn.execute("SELECT set_config('tcp_keepalives_idle', %s, false), "
                     "set_config('tcp_keepalives_interval', %s, false), "
                     "set_config('tcp_keepalives_count', %s, false), set_config('tcp_user_timeout', %s, false)",
                     (str(probe), str(probe), str(_KEEPALIVE_PROBES), str(self._lease_s * 1000)))
        return conn

    def try_acquire(self, thread_id: str, cancel: threading.Event) -> Lease | None:
        """Hold the thread, or None when another replica holds it (or this one: advisory locks are re-entrant
        within a session, so a second hold here would count twice and outlive its release). `cancel` is set if
        the lease is lost while held. Raises the driver's OperationalError when the database is unreachable."""
        with self._lock:
            if thread_id in self._held:
                return None
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._drop("the lease connection was found closed")
                self._conn = self._connect()
            try:
                taken = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (lease_key(thread_id),)).fetchone()[0]
            except self._errors:
                self._drop("the lease connection broke while taking a lease")
                raise
            if not taken:
                return None
            lease = self._held[thread_id] = Lease(thread_id, cancel)
            return lease

    def release(self, thread_id: str) -> None:
        """Give the thread back (nothing when this replica does not hold it, e.g. its lease was lost)."""
        with self._lock:
            if self._held.pop(thread_id, None) is None or self._conn is None:
                return
            try:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (lease_key(thread_id),))
            except self._errors:
                self._drop("the lease connection broke while giving a lease back")

    def _beat(self) -> None:
        """Ping the lease connection every lease_s / 3 and drop it at the first failure, so the episodes holding
        its (now released) locks stop before another replica has run much of their threads."""
        interval = self._lease_s / 3
        while not self._closing.wait(interval):
            with self._lock:
                if self._conn is None:
                    continue
                try:
                    self._conn.execute("SELECT 1")
                except self._errors as exc:
                    self._drop(f"{exc.__class__.__name__}: {exc}".splitlines()[0])

    def _drop(self, why: str) -> None:
        """The session is gone, and every lock it held with it: mark each lease lost and cancel its episode (called
        under the lock)."""
        if self._held:
            log.warning("thread leases lost (%s): stopping the episodes of %d thread(s) at their next step; their "
                        "threads resume from the last committed step on a retry", why, len(self._held))
        for lease in self._held.values():
            lease.lost = True
            lease.cancel.set()
        self._held.clear()
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        """Stop the heartbeat and close the connection, which frees every thread this replica holds."""
        self._closing.set()
        with self._lock:
            self._drop("the server is stopping")
        self._heartbeat.join(timeout=self._lease_s)
