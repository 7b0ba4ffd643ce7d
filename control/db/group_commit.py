"""Group commit: the writes waiting for the database thread go in together, in one transaction.

A submission storm queues many small transactions behind SQLite's single writer thread; each
paid the session set-up, BEGIN, the counter upsert and COMMIT on its own (profile of the admission
benchmark). `GroupCommit.submit(item)` queues the item; one batch at a time takes everything
queued (up to `max_batch`) and applies it with `apply(session, items)` in one transaction on the
database thread, then answers each caller with its own result. While one batch runs the next one
gathers, so a lone caller waits no longer than before and a storm gets bigger batches.

A batch that fails is applied again one item at a time, so one bad item fails only its own
caller; except when the database is unavailable (the commit's outcome may be unknown): then every
caller of the batch gets UNAVAILABLE and retries, as each did alone before. A caller that gave
up (cancelled) before its batch was taken is left out of it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from sqlalchemy.orm import Session

from common import errors
from control.db.engine import Database

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

MAX_BATCH = 256

log = logging.getLogger("starforge.control")


class GroupCommit(Generic[I, R]):
    """Applies queued items in batches, one transaction per batch (module docstring).

    No task drives it: `submit` hands a batch to the database thread at once when none is running,
    and the thread's done-callback, on the event loop, answers the batch and hands over the next.
    An awaiting drainer cost each batch two more turns of the event loop (its start, and its wake-up
    before it could answer anyone); under load a turn is milliseconds (thousands of log followers'
    messages), and a log line waits for its batch before a follower can see it."""

    def __init__(
        self,
        db: Database,
        apply: Callable[[Session, Sequence[I]], list[R]],
        *,
        max_batch: int = MAX_BATCH,
        weigh: Callable[[I], int] | None = None,
        max_weight: int = 0,
    ) -> None:
        """`weigh` and `max_weight`: a batch also stops before the item that would take its
        total weight (bytes, say) over `max_weight`; it always takes at least one item."""
        self.db = db
        self.apply = apply
        self.max_batch = max_batch
        self.weigh = weigh
        self.max_weight = max_weight
        self._waiting: list[_Waiter[I, R]] = []
        self._alone: collections.deque[_Waiter[I, R]] = collections.deque()  # a failed batch's items, again
        self._running = False

    async def submit(self, item: I, then: Callable[[R], object] | None = None) -> R:
        """Apply `item` with the others waiting; its result once its batch has committed.

        `then(result)` runs on the event loop as soon as the batch has committed, before the
        caller wakes, also when the caller gave up meanwhile (its item was committed all the
        same); never for an item that failed. It is what must follow the commit at once, such as
        waking the followers of what was stored."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._waiting.append(_Waiter(item, fut, then))
        if not self._running:
            self._next(loop)
        return await fut

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the next batch (a failed batch's items first, one at a time) to the database thread."""
        try:
            batch = self._take()
        except Exception as exc:  # `weigh` failed: nobody may wait forever
            for w in [*self._alone, *self._waiting]:
                _settle(w.fut, exc)
            self._alone.clear()
            self._waiting.clear()
            batch = []
        if not batch:
            self._running = False
            return
        items = [w.item for w in batch]
        self._running = True
        try:
            done = self.db.submit(lambda s: self.apply(s, items))
        except Exception as exc:  # the database is closed: nobody may wait forever
            for w in batch:
                _settle(w.fut, exc)
            self._next(loop)
            return
        done.add_done_callback(lambda f: _on_loop(loop, self._answer, batch, f))

    def _take(self) -> list[_Waiter[I, R]]:
        """The next batch, without the callers that gave up; empty when nobody waits."""
        while self._alone or self._waiting:
            if self._alone:
                batch = [self._alone.popleft()]
            else:
                n = self._taken()
                batch = self._waiting[:n]
                del self._waiting[:n]
            batch = [w for w in batch if not w.fut.done()]  # a caller that gave up is left out
            if batch:
                return batch
        return []

    def _taken(self) -> int:
        """How many of the waiting items the next batch takes (`max_batch`, `max_weight`)."""
        n = min(len(self._waiting), self.max_batch)
        if self.weigh is None:
            return n
        total = 0
        for i, w in enumerate(self._waiting[:n]):
            total += self.weigh(w.item)
            if total > self.max_weight and i:
                return i
        return n

    def _answer(self, batch: list[_Waiter[I, R]], done: concurrent.futures.Future[list[R]]) -> None:
        """On the event loop: answer the batch's callers, then hand over the next batch."""
        try:
            exc = done.exception()
            if exc is None:
                results = done.result()
                if len(results) != len(batch):
                    raise RuntimeError(f"a batch of {len(batch)} items was answered with {len(results)} results")
                for w, result in zip(batch, results, strict=True):
                    _answer_one(w, result)
            elif isinstance(exc, errors.Unavailable) or len(batch) == 1 or not isinstance(exc, Exception):
                # the database is down (or the commit's fate unknown): each caller retries, as before
                for w in batch:
                    _settle(w.fut, exc)
            else:
                self._alone.extendleft(reversed(batch))  # one bad item must fail only its own caller
        except Exception as exc:
            for w in batch:
                _settle(w.fut, exc)
        finally:
            self._next(asyncio.get_running_loop())


def _answer_one(w: _Waiter[I, R], result: R) -> None:
    """`then` (the item was committed, whether or not its caller still waits), then the caller."""
    failed: Exception | None = None
    if w.then is not None:
        try:
            w.then(result)
        except Exception as exc:  # committed, but what must follow failed: the caller hears of it
            failed = exc
    if w.fut.done():  # the caller gave up meanwhile
        if failed is not None:
            log.error("what follows a committed item failed, and its caller had gone", exc_info=failed)
        return
    if failed is not None:
        w.fut.set_exception(failed)
    else:
        w.fut.set_result(result)


class _Waiter(Generic[I, R]):
    __slots__ = ("fut", "item", "then")

    def __init__(self, item: I, fut: asyncio.Future[R], then: Callable[[R], object] | None) -> None:
        self.item, self.fut, self.then = item, fut, then


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    """Call `fn(*args)` on `loop` from a worker thread; nothing once the loop is closed (its
    waiters went with it)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _settle(fut: asyncio.Future[R], exc: BaseException) -> None:
    if fut.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        fut.cancel()
    else:
        fut.set_exception(exc)


class Batched(Generic[I, R]):
    """Calls that wait together run as one batch, in one hop to a worker thread.

    `run(items)` runs on the event loop and returns each item's result or the exception it raised
    (`per_item` below), in order; the callers' awaits get their own. Each hop to a worker thread
    (`Database.run`, `asyncio.to_thread`) cost a submission a thread hand-off and a GIL hand-over;
    a storm of submissions now pays one per batch (admission benchmark). While one batch runs the
    next one gathers, as in `GroupCommit`; up to `parallel` batches run at once (PostgreSQL's
    transactions run side by side on several threads, and a batch there mostly waits on the
    server). When `run` itself raises, a batch of several is run again one item at a time, so an
    unexpected error fails only its own caller.
    """

    def __init__(
        self,
        run: Callable[[list[I]], Awaitable[list[R | Exception]]],
        *,
        max_batch: int = MAX_BATCH,
        parallel: int = 1,
    ) -> None:
        self.run = run
        self.max_batch = max_batch
        self.parallel = parallel
        self._waiting: list[tuple[I, asyncio.Future[R]]] = []
        self._drainers: set[asyncio.Future[None]] = set()

    async def submit(self, item: I) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, fut))
        # a drainer that has just finished stays in the set until its done-callback runs: count
        # the running ones, or a caller arriving in between would wait for nobody
        if sum(not d.done() for d in self._drainers) < self.parallel:
            drainer = asyncio.ensure_future(self._drain())
            self._drainers.add(drainer)
            drainer.add_done_callback(self._drainers.discard)
        return await fut

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = [(item, fut) for item, fut in self._waiting[: self.max_batch] if not fut.done()]
                del self._waiting[: self.max_batch]
                if batch:
                    await self._apply(batch)
        except BaseException as exc:
            for _, fut in self._waiting:
                _settle(fut, exc)
            self._waiting.clear()
            raise

    async def _apply(self, batch: list[tuple[I, asyncio.Future[R]]]) -> None:
        try:
            results = await self.run([item for item, _ in batch])
        except errors.Unavailable as exc:  # the database is down: each caller retries, as before
            for _, fut in batch:
                _settle(fut, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc)
                return
            for one in batch:
                await self._apply([one])
            return
        except BaseException as exc:
            for _, fut in batch:
                _settle(fut, exc)
            raise
        for (_, fut), result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                _settle(fut, result)
            elif not fut.done():
                fut.set_result(result)


def per_item(fn: Callable[[I], R], items: Sequence[I], catch: type[Exception] = Exception) -> list[R | Exception]:
    """`fn` of each item, or the `catch` exception it raised (for `Batched`); any other exception
    propagates and fails the batch (which `Batched` then runs one item at a time)."""
    out: list[R | Exception] = []
    for item in items:
        try:
            out.append(fn(item))
        except catch as exc:
            out.append(exc)
    return out
