"""What the ledger says of the jobs followed in this process, read for all of them at once.

A follower served from memory (control.telemetry.log_tail) must still notice what another
replica did: lines stored there after this process's tail, a state changed there. It used to read
the ledger itself at least every LEDGER_CHECK_SECONDS: shared by the followers of a job at one
cursor, that was still a read per followed job per period on the one database thread the ingest
writes also need. `LedgerHeads` reads, every period, the head of every followed job in two
queries whatever their number: the job's state and the newest line of its current attempt (its
ingest cursor). A follower compares that with its own state and with the tail: only when the
ledger is ahead of both does it read the ledger.

Only an accelerator, like the tails: a head is at most one period old, so what another replica
did reaches a follower within two periods, and a state this process changed is notified at once.

`PeriodicReads` is the general form (a value per watched key, one read of all the keys per
period); the ingest service reads the stop or pause signal of all its Report streams' attempts
with it, instead of a read per stream and period. Used on the event loop only.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from sqlalchemy.orm import Session

from control.ledger import jobs

log = logging.getLogger("starforge.control.periodic_reads")

# (job state, (attempt number, offset) of the newest line of its current attempt, or None)
Head = tuple[int, tuple[int, int] | None]
V = TypeVar("V")
RunRead = Callable[[Callable[[Session], dict[str, Head]]], Awaitable[dict[str, Head]]]


class PeriodicReads(Generic[V]):
    """A value per watched key, read for all the keys at once every `period` seconds by one task
    that runs while any key is watched. `seq` changes with every read."""

    def __init__(self, read: Callable[[list[str]], Awaitable[dict[str, V]]], period: float) -> None:
        self._read = read
        self.period = period
        self._watched: collections.Counter[str] = collections.Counter()
        self._values: dict[str, V] = {}
        self.seq = 0
        self._task: asyncio.Task[None] | None = None

    def watch(self, key: str) -> None:
        self._watched[key] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._refresh())

    def unwatch(self, key: str) -> None:
        self._watched[key] -= 1
        if self._watched[key] <= 0:
            del self._watched[key]
            self._values.pop(key, None)

    def get(self, key: str) -> V | None:
        """The key's value at the last read (None before the first, or when the read found none)."""
        return self._values.get(key)

    async def _refresh(self) -> None:
        while self._watched:
            await asyncio.sleep(self.period)
            keys = list(self._watched)
            if not keys:
                break
            try:
                values = await self._read(keys)
            except Exception as exc:  # the database away: the watchers find no value and read themselves
                log.warning("periodic read of %d keys failed: %s", len(keys), exc)
                values = {}
            self._values = {k: v for k, v in values.items() if k in self._watched}
            self.seq += 1


class LedgerHeads(PeriodicReads[Head]):
    """The heads of the jobs followed here (see the module's docstring)."""

    def __init__(
        self, run: Callable[[Callable[[Session], dict[str, Head]]], Awaitable[dict[str, Head]]], period: float
    ):
        super().__init__(lambda ids: run(functools.partial(read_heads, job_ids=ids)), period)

    def head(self, job_id: str) -> Head | None:
        return self.get(job_id)


def read_heads(s: Session, *, job_ids: Sequence[str]) -> dict[str, Head]:
    """The head of each job of `job_ids` that exists."""
    out: dict[str, Head] = {}
    for i in range(0, len(job_ids), 500):
        for job_id, state, newest in jobs.log_heads(s, job_ids[i : i + 500]):
            out[job_id] = (state, newest)
    return out
