"""One scheduler among the control-plane replicas of a PostgreSQL ledger: the leader.

Every replica serves the API, reconciles and launches; only the replica that holds a PostgreSQL
session-level advisory lock (LOCK_KEY) runs placement cycles. Each replica running its own cycles
over the same queue cost each of them a cycle's reads and wait-reason writes (bench admission, two
replicas: more CPU per submission than one process). The lock lives on a connection of its own,
outside the pool, in autocommit: when the leader dies (even `kill -9`) its connection closes,
PostgreSQL ends that session and frees the lock, and the next replica that asks (every
CHECK_SECONDS) takes it over and cycles. The leader checks its connection as often; one that lost
it (the database restarted, the network dropped) stops cycling until it holds the lock again.

Leadership saves work; it is not what keeps a job from running twice: claims lock their job rows
(FOR UPDATE SKIP LOCKED, dispatch.py), so the moment in which two replicas both think they lead
costs a duplicate cycle, never a duplicate launch. A job queued through another replica waits for
the leader's next periodic cycle (`scheduler_interval_seconds`): notifications stay in the process
that made them. SQLite has one replica by definition: it always leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import psycopg

from control.db.engine import Database

log = logging.getLogger("starforge.scheduler")

LOCK_KEY = 0x5346_5343_4C45_4144  # "SFSCLEAD": the key of the scheduler's advisory lock (a bigint)
CHECK_SECONDS = 1.0  # how often a replica asks for the lock, and the leader checks it still holds it
CONNECT_TIMEOUT_SECONDS = 5


class Leadership:
    """Whether this replica's scheduler leads (module docstring); asked before every cycle."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._leading = db.sqlite
        self._checked_at = float("-inf")
        self.changed = False  # leadership changed since the scheduler last looked (it resets this)

    async def leading(self) -> bool:
        """True when this replica's scheduler should cycle now; asks PostgreSQL at most every
        CHECK_SECONDS (the answer in between is the last one)."""
        if self.db.sqlite:
            return True
        now = time.monotonic()
        if now - self._checked_at >= CHECK_SECONDS:
            self._checked_at = now
            was = self._leading
            self._leading = await asyncio.to_thread(self._check)
            if self._leading != was:
                log.info("this replica %s the scheduler's leader", "is now" if self._leading else "is no longer")
                self.changed = True
        return self._leading

    def _check(self) -> bool:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = None
                conninfo = self.db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
                self._conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
                self._leading = False
            if self._leading:
                self._conn.execute("SELECT 1")
                return True
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            return bool(row and row[0])
        except psycopg.Error as e:
            log.warning("scheduler leadership unknown, not cycling: %s", str(e).strip().splitlines()[:1])
            self._drop()
            return False

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    async def close(self) -> None:
        """Give the lock up (closing its session frees it at once)."""
        if self._conn is not None:
            await asyncio.to_thread(self._drop)
        self._leading = self.db.sqlite
