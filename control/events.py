"""In-process notifications: wake followers and the scheduler when the ledger changes.

Followers also poll (every second or so), so a notification lost to another replica only delays
them; this keeps replicas correct without a message bus.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

ANY = "*"


MAX_GENERATIONS = 10_000


class Notifier:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        # key -> a number that changes on every notification of it (from one counter, so a value
        # is never reused even after its key was pruned): readers that saw the same generation
        # may share one read made after it (see control.jobs_api.SharedReads).
        self._generations: dict[str, int] = {}
        self._seq = 0

    def notify(self, *keys: str) -> None:
        for key in (*keys, ANY):
            self._seq += 1
            self._generations[key] = self._seq
            for ev in self._waiters.get(key, ()):
                ev.set()
        if len(self._generations) > MAX_GENERATIONS:
            self._generations = {k: g for k, g in self._generations.items() if k in self._waiters}

    def generation(self, key: str) -> int:
        """Changes whenever `key` is notified (0 before the first time, or once pruned)."""
        return self._generations.get(key, 0)

    async def wait(self, key: str, timeout: float) -> bool:
        """Wait until `key` is notified or `timeout` passes; True when notified."""
        ev = asyncio.Event()
        self._waiters[key].add(ev)
        try:
            # asyncio.timeout, not wait_for: no task per wait (thousands of followers wait at once)
            async with asyncio.timeout(timeout):
                await ev.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters[key].discard(ev)
            if not self._waiters[key]:
                self._waiters.pop(key, None)
