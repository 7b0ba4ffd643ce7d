"""control.events.Notifier: the waiters of a key share one timer, each is woken once."""

from __future__ import annotations

import asyncio

from control.events import Notifier


async def test_a_notification_wakes_every_waiter_of_its_key_and_no_other() -> None:
    n = Notifier()
    woken = [asyncio.ensure_future(n.wait("logs:a", 5.0)) for _ in range(100)]
    other = asyncio.ensure_future(n.wait("logs:b", 5.0))
    await asyncio.sleep(0)
    g = n.generation("logs:a")
    n.notify("logs:a")
    assert await asyncio.gather(*woken) == [True] * 100
    assert n.generation("logs:a") > g
    assert not other.done()
    n.notify("logs:b")
    assert await other is True


def _timers_of(n: Notifier, loop: asyncio.AbstractEventLoop) -> int:
    """The loop's pending timers that call back into ``n``.

    Only these are counted: the loop holds other timers of its own and of the test
    runner, which come and go while the test runs.
    """
    handles = loop._scheduled  # type: ignore[attr-defined]
    return sum(1 for h in handles if not h.cancelled() and getattr(h._callback, "__self__", None) is n)


async def test_waiters_of_a_key_share_one_timer_and_time_out_together() -> None:
    n = Notifier()
    loop = asyncio.get_running_loop()
    started = loop.time()
    waits = [asyncio.ensure_future(n.wait("k", 0.2)) for _ in range(50)]
    await asyncio.sleep(0)
    assert _timers_of(n, loop) == 1
    assert await asyncio.gather(*waits) == [False] * 50
    assert 0.15 <= loop.time() - started < 2.0
    # the key's slot is gone: a later notification wakes nobody and a new wait times out again
    assert _timers_of(n, loop) == 0
    n.notify("k")
    assert await n.wait("k", 0.05) is False


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    n = Notifier()
    a = asyncio.ensure_future(n.wait("k", 5.0))
    b = asyncio.ensure_future(n.wait("k", 5.0))
    await asyncio.sleep(0)
    a.cancel()
    await asyncio.sleep(0)
    assert a.cancelled() and not b.done()
    n.notify("k")
    assert await b is True


async def test_different_timeouts_on_one_key_each_keep_their_own() -> None:
    n = Notifier()
    short = asyncio.ensure_future(n.wait("k", 0.05))
    long = asyncio.ensure_future(n.wait("k", 30.0))
    assert await short is False
    assert not long.done()
    n.notify("k")
    assert await long is True
    assert await n.wait("k", 0) is False
