"""In-process notifications: wake followers and the scheduler when the ledger changes.

Followers also poll (every second or so), so a notification lost to another replica only delays
them; this keeps replicas correct without a message bus.
"""

from __future__ import annotations

import asyncio

ANY = "*"


MAX_GENERATIONS = 10_000


class _Slot:
    """The waiters of one key with one timeout: one timer for all of them, one future each."""

    __slots__ = ("timer", "waiters")

    def __init__(self) -> None:
        self.waiters: list[asyncio.Future[bool]] = []
        self.timer: asyncio.TimerHandle | None = None

    def wake(self, notified: bool) -> None:
        if self.timer is not None:
            self.timer.cancel()
        for w in self.waiters:
            if not w.done():  # a waiter cancelled meanwhile (its stream closed) is skipped
                w.set_result(notified)


class Notifier:
    """Wakes the waiters of a key when it is notified.

    Thousands of followers wait on a few keys at once (`logs:<job>`, each woken every time the
    job's lines are stored), so a wait costs one future: the waiters of a key that wait with the
    same timeout share one slot and its one timer, created by the first of them. So a wait may time
    out early, when the slot's timer, started by an earlier waiter, fires: a wait is a poll's
    pause, at most `timeout` long, never a clock."""

    def __init__(self) -> None:
        self._slots: dict[str, dict[float, _Slot]] = {}
        # key -> a number that changes on every notification of it (from one counter, so a value
        # is never reused even after its key was pruned): readers that saw the same generation
        # may share one read made after it (see control.jobs_api.SharedReads).
        self._generations: dict[str, int] = {}
        self._seq = 0

    def notify(self, *keys: str) -> None:
        for key in (*keys, ANY):
            self._seq += 1
            self._generations[key] = self._seq
            slots = self._slots.pop(key, None)
            if slots:
                for slot in slots.values():
                    slot.wake(True)
        if len(self._generations) > MAX_GENERATIONS:
            self._generations = {k: g for k, g in self._generations.items() if k in self._slots}

    def generation(self, key: str) -> int:
        """Changes whenever `key` is notified (0 before the first time, or once pruned)."""
        return self._generations.get(key, 0)

    async def wait(self, key: str, timeout: float) -> bool:
        """Wait until `key` is notified or at most `timeout` passes; True when notified."""
        if timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = {}
        slot = slots.get(timeout)
        if slot is None:
            slot = slots[timeout] = _Slot()
            slot.timer = loop.call_later(timeout, self._expire, key, timeout, slot)
        waiter: asyncio.Future[bool] = loop.create_future()
        slot.waiters.append(waiter)
        return await waiter

    def _expire(self, key: str, timeout: float, slot: _Slot) -> None:
        slots = self._slots.get(key)
        if slots is not None and slots.get(timeout) is slot:
            del slots[timeout]
            if not slots:
                del self._slots[key]
        slot.timer = None
        slot.wake(False)
