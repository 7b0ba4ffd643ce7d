"""Per-attempt locks and the launches in progress, the same for every kind that needs them."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Iterator


class AttemptLocks:
    """One asyncio lock per attempt id (dropped once nobody holds it) and the ids being launched.

    An attempt in `launching` has no backend object yet, or not a complete one: observe reports
    it PENDING rather than "not found" (which the control plane would take for "never started").
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self.launching: set[str] = set()

    def lock(self, attempt_id: str) -> asyncio.Lock:
        """The attempt's lock; every caller that holds a reference gets the same one."""
        lock = self._locks.get(attempt_id)
        if lock is None:
            lock = self._locks[attempt_id] = asyncio.Lock()
        return lock

    @contextlib.contextmanager
    def launching_now(self, attempt_id: str) -> Iterator[None]:
        """Mark the attempt as launching for the duration of the block."""
        self.launching.add(attempt_id)
        try:
            yield
        finally:
            self.launching.discard(attempt_id)
