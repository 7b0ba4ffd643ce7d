"""The database pool's two queues: follower (background) reads never hold back other calls."""

from __future__ import annotations

import threading

import pytest

from control.db.engine import PriorityPool


def test_a_queued_call_runs_before_queued_background_calls() -> None:
    pool = PriorityPool(1, "test-db")
    try:
        release = threading.Event()
        started = threading.Event()
        order: list[str] = []

        def blocker() -> None:
            started.set()
            release.wait()

        first = pool.submit(blocker, background=True)
        assert started.wait(10)
        reads = [pool.submit(order.append, f"read{i}", background=True) for i in range(3)]
        write = pool.submit(order.append, "write")
        assert pool.waiting() == (1, 3)
        release.set()
        for f in (first, write, *reads):
            f.result(10)
        assert order == ["write", "read0", "read1", "read2"]
    finally:
        pool.shutdown()


def test_cancelled_calls_are_skipped_and_errors_reach_the_caller() -> None:
    pool = PriorityPool(1, "test-db")
    try:
        release = threading.Event()
        started = threading.Event()
        ran: list[int] = []

        def blocker() -> None:
            started.set()
            release.wait()

        def boom() -> None:
            raise ValueError("bad")

        pool.submit(blocker)
        assert started.wait(10)
        cancelled = pool.submit(ran.append, 1, background=True)
        assert cancelled.cancel()
        failing = pool.submit(boom)
        release.set()
        with pytest.raises(ValueError, match="bad"):
            failing.result(10)
        pool.submit(ran.append, 2).result(10)
        assert ran == [2]
    finally:
        pool.shutdown()


def test_shutdown_finishes_queued_calls_then_refuses_new_ones() -> None:
    pool = PriorityPool(2, "test-db")
    done: list[int] = []
    futures = [pool.submit(done.append, i, background=i % 2 == 0) for i in range(20)]
    pool.shutdown()
    assert all(f.done() for f in futures)
    assert sorted(done) == list(range(20))
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(done.append, 99)
