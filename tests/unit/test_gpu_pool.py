"""The local executor's pool: a full node asks its holders whether they still run, oldest first,
only those of the series asked for and only until there is room; it refuses when none ended."""

from __future__ import annotations

import pytest

from common import errors
from executor_svc.local.config import SeriesConfig
from executor_svc.local.inventory import GpuPool


class Running:
    """`still_running` over a set of ended attempts, recording whom it was asked about."""

    def __init__(self, ended: set[str]) -> None:
        self.ended = ended
        self.asked: list[str] = []

    async def __call__(self, attempt_id: str) -> bool:
        self.asked.append(attempt_id)
        return attempt_id not in self.ended


def full_pool() -> GpuPool:
    pool = GpuPool([SeriesConfig("cpu", slots=4), SeriesConfig("h100", gpus=2)])
    for i in range(4):
        pool.hold(f"cpu{i}", "cpu", [])
    pool.hold("gpu0", "h100", [0])
    pool.hold("gpu1", "h100", [1])
    return pool


async def test_a_full_series_asks_its_holders_oldest_first_until_there_is_room() -> None:
    pool = full_pool()
    running = Running({"cpu1", "cpu2", "gpu0"})
    await pool.ensure_room("cpu", 0, running)
    assert running.asked == ["cpu0", "cpu1"]  # cpu1 ended: room; cpu2 (ended too) waits
    assert set(pool.holders()) == {"cpu0", "cpu2", "cpu3", "gpu0", "gpu1"}
    assert await pool.allocate("a", "cpu", 0, running) == []
    running.asked.clear()
    await pool.ensure_room("h100", 1, running)
    assert running.asked == ["gpu0"]  # no cpu holder asked
    assert pool.free("h100") == [0]


async def test_room_already_there_asks_nobody_and_a_full_node_refuses() -> None:
    pool = full_pool()
    pool.release("gpu1")
    running = Running(set())
    await pool.ensure_room("h100", 1, running)
    assert running.asked == []
    with pytest.raises(errors.ResourceExhausted, match="all 4 cpu slots are in use"):
        await pool.ensure_room("cpu", 0, running)
    assert running.asked == ["cpu0", "cpu1", "cpu2", "cpu3"]


async def test_release_ended_without_a_bound_asks_everyone() -> None:
    pool = full_pool()
    running = Running({"cpu3", "gpu1"})
    await pool.release_ended(running)
    assert running.asked == ["cpu0", "cpu1", "cpu2", "cpu3", "gpu0", "gpu1"]
    assert set(pool.holders()) == {"cpu0", "cpu1", "cpu2", "gpu0"}
