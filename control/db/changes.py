"""Committed changes to QUEUED jobs, for the scheduler's in-memory heads of line.

A transaction that makes a job enter or leave QUEUED, or changes when a QUEUED job may run, notes
the job id in its session (`note`); when that session commits, the ids go to every subscriber of
the database's feed (a rolled-back transaction publishes nothing). The scheduler re-reads those
jobs' rows on its next cycle instead of its whole queue (control/scheduler/heads.py).

The feed is a hint and only covers this process: another replica's changes reach the scheduler
by its periodic full read of the queue, and a claim always re-checks the job in the database.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

KEY = "starforge.queue_changes"
# Ids a subscriber may hold unread; past this it is marked overflowed (it must read everything again).
MAX_PENDING = 100_000


def note(s: Session, job_id: str) -> None:
    """Record that `job_id`'s place in the queue changed in this transaction."""
    s.info.setdefault(KEY, set()).add(job_id)


class Subscription:
    """The job ids committed since the last `drain`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self._overflowed = False

    def _add(self, ids: set[str]) -> None:
        with self._lock:
            if self._overflowed:
                return
            self._ids |= ids
            if len(self._ids) > MAX_PENDING:
                self._ids.clear()
                self._overflowed = True

    def drain(self) -> tuple[set[str], bool]:
        """The ids committed since the last drain, and whether some were lost (too many)."""
        with self._lock:
            ids, lost = self._ids, self._overflowed
            self._ids, self._overflowed = set(), False
            return ids, lost


class ChangeFeed:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: weakref.WeakSet[Subscription] = weakref.WeakSet()

    def subscribe(self) -> Subscription:
        sub = Subscription()
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def publish(self, ids: set[str]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub._add(ids)

    def attach(self, sessions: sessionmaker[Session]) -> None:
        """Publish what the sessions of `sessions` note, when they commit."""

        def committed(session: Session) -> None:
            ids = session.info.pop(KEY, None)
            if ids:
                self.publish(ids)

        def rolled_back(session: Session, *_: Any) -> None:
            session.info.pop(KEY, None)

        event.listen(sessions, "after_commit", committed)
        event.listen(sessions, "after_rollback", rolled_back)
