"""`Batched`: callers waiting together share one run, each gets its own result or error."""

from __future__ import annotations

import asyncio

import pytest

from common import errors
from control.db.group_commit import Batched, per_item


def _double(x: int) -> int:
    if x < 0:
        raise errors.InvalidArgument(f"{x} is negative")
    return 2 * x


def test_callers_waiting_together_share_a_run_and_get_their_own_results() -> None:
    runs: list[list[int]] = []

    async def run(items: list[int]) -> list[int | Exception]:
        runs.append(list(items))
        await asyncio.sleep(0)
        return per_item(_double, items, errors.StarforgeError)

    async def go() -> list[int | BaseException]:
        b: Batched[int, int] = Batched(run)
        return await asyncio.gather(*(b.submit(i) for i in (1, -2, 3, 4)), return_exceptions=True)

    results = asyncio.run(go())
    assert results[0] == 2 and results[2] == 6 and results[3] == 8
    assert isinstance(results[1], errors.InvalidArgument)  # only its own caller fails
    assert len(runs) <= 2 and sorted(x for r in runs for x in r) == [-2, 1, 3, 4]


def test_an_unexpected_error_of_the_run_fails_only_its_own_item() -> None:
    async def run(items: list[int]) -> list[int | Exception]:
        if 7 in items:
            raise RuntimeError("bug")  # not caught per item: the whole run fails
        return [x + 1 for x in items]

    async def go() -> list[int | BaseException]:
        b: Batched[int, int] = Batched(run)
        return await asyncio.gather(*(b.submit(i) for i in (1, 7, 3)), return_exceptions=True)

    results = asyncio.run(go())
    assert results[0] == 2 and results[2] == 4
    assert isinstance(results[1], RuntimeError)


def test_an_unavailable_database_fails_every_caller_of_the_batch_at_once() -> None:
    calls = 0

    async def run(items: list[int]) -> list[int | Exception]:
        nonlocal calls
        calls += 1
        raise errors.Unavailable("the ledger database is unavailable")

    async def go() -> list[int | BaseException]:
        b: Batched[int, int] = Batched(run)
        return await asyncio.gather(*(b.submit(i) for i in range(5)), return_exceptions=True)

    results = asyncio.run(go())
    assert all(isinstance(r, errors.Unavailable) for r in results)
    assert calls <= 2  # never retried one item at a time


@pytest.mark.parametrize(("n", "parallel"), [(1, 1), (300, 1), (300, 4)])
def test_every_caller_is_answered_beyond_one_batch(n: int, parallel: int) -> None:
    async def run(items: list[int]) -> list[int | Exception]:
        await asyncio.sleep(0.001)
        return list(items)

    async def go() -> list[int]:
        b: Batched[int, int] = Batched(run, max_batch=64, parallel=parallel)
        return list(await asyncio.gather(*(b.submit(i) for i in range(n))))

    assert asyncio.run(go()) == list(range(n))


def test_a_caller_right_after_a_batch_finished_is_answered() -> None:
    """The drainer that answered a caller has finished, but its done-callback has not run yet
    when that caller submits again: the new item must still get a drainer."""

    async def run(items: list[int]) -> list[int | Exception]:
        return list(items)  # answers without yielding to the loop

    async def go() -> list[int]:
        b: Batched[int, int] = Batched(run, parallel=1)
        return [await asyncio.wait_for(b.submit(i), 10) for i in range(5)]

    assert asyncio.run(go()) == list(range(5))
