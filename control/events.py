"""In-process notifications: wake followers and the scheduler when the ledger changes.

Followers also poll (every second or so), so a notification lost to another replica only delays
them; this keeps replicas correct without a message bus.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

ANY = "*"


class Notifier:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)

    def notify(self, *keys: str) -> None:
        for key in (*keys, ANY):
            for ev in self._waiters.get(key, ()):
                ev.set()

    async def wait(self, key: str, timeout: float) -> bool:
        """Wait until `key` is notified or `timeout` passes; True when notified."""
        ev = asyncio.Event()
        self._waiters[key].add(ev)
        try:
            await asyncio.wait_for(ev.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters[key].discard(ev)
            if not self._waiters[key]:
                self._waiters.pop(key, None)
