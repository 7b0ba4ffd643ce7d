"""The retry schedule of control/scheduler/backoff.py."""

from __future__ import annotations

import random

from control.scheduler import backoff


def test_delays_grow_to_the_cap_with_jitter() -> None:
    rng = random.Random(7)
    policy = backoff.Policy(base=1.0, cap=8.0)
    for tries, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = {policy.delay(tries, rng) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (tries, delays)
        assert len(delays) > 1  # jittered


def test_max_calls_bounds_any_run_of_the_schedule() -> None:
    policy = backoff.Policy(base=1.0, cap=30.0)
    tracker = backoff.Tracker(policy, rng=random.Random(1))
    now, calls = 0.0, 0
    while now <= 20.0:
        if tracker.due("a", now):
            calls += 1
            tracker.tried("a", now)
        now += 0.01
    assert 1 < calls <= policy.max_calls(20.0)
    assert policy.max_calls(0.0) == 1


def test_tracker_is_per_attempt_and_resets() -> None:
    tracker = backoff.Tracker(backoff.STOP)
    tracker.tried("a", 100.0)
    assert not tracker.due("a", 100.0) and tracker.due("b", 100.0)
    tracker.reset("a")
    assert tracker.due("a", 100.0)
    tracker.tried("a", 100.0)
    tracker.keep_only({"b"})
    assert tracker.tries("a") == 0


def test_tries_after_matches_the_schedule() -> None:
    policy = backoff.Policy(base=1.0, cap=10.0)
    assert policy.tries_after(0.0) == 1
    assert policy.tries_after(1.0) == 2
    assert policy.tries_after(7.0) == 4
