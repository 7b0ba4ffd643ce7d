"""The scheduler's in-memory heads of line (control/scheduler/heads.py), SQLite and PostgreSQL.

With a big queue a cycle decides on each owner's head of line held in memory since the last full
pass and refreshed from what changed. These check that the copy follows the ledger (new jobs,
stops, requeues, ended backoffs, an owner's held prefix running out) and that a head another
replica took meanwhile is harmless: the claim finds it gone and the cycle decides again.
"""

from __future__ import annotations

import functools
import pathlib
import random
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from control.config import FleetConfig, InventoryConfig
from control.db import engine
from control.db import models as m
from control.db.engine import Database
from control.ledger import jobs, outcomes
from control.ledger import state_machine as sm
from control.scheduler import dispatch, heads, placement
from control.scheduler.dispatch import Scheduler
from tests import factories as f
from tests.integration.ledger.test_scheduler import _ctx, _finish, _queue, _state, _users

TWO_NODES = [FleetConfig("gpu", "local", "127.0.0.1:9", inventory=[InventoryConfig("h200", 2, 8)])]


@pytest.fixture(autouse=True)
def big_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handful of candidates is a "big queue": cycles between full passes take the fast pass."""
    monkeypatch.setattr(dispatch, "FULL_PASS_CANDIDATES", 3)


@pytest.fixture
def sched(db: Database, tmp_path: pathlib.Path) -> Scheduler:
    return Scheduler(_ctx(db, tmp_path))


@pytest.fixture
def other_replica(db: Database) -> Iterator[Database]:
    """The same ledger through another Database: its commits do not reach this process's feed,
    as another replica's would not."""
    twin = Database(db.url)
    yield twin
    twin.close()


def _fast(sched: Scheduler) -> None:
    """The next cycles are between two full passes."""
    sched._status_at = time.time()


def _attempts(db: Database) -> dict[str, int]:
    rows = db.run_sync(lambda s: s.execute(select(m.Attempt.job_id, func.count()).group_by(m.Attempt.job_id)).all())
    return {job_id: n for job_id, n in rows}


def test_a_head_another_replica_took_is_dropped_and_the_next_one_placed(
    db: Database, other_replica: Database, tmp_path: pathlib.Path
) -> None:
    a = Scheduler(_ctx(db, tmp_path / "a", fleets=TWO_NODES))
    b = Scheduler(_ctx(other_replica, tmp_path / "b", fleets=TWO_NODES))
    _users(db, "alice", "bob")
    alice, bob = _queue(db, "alice", 6), _queue(db, "bob", 6)
    assert {c.job_id for c in db.run_sync(a._place)} == {alice[0], bob[0]}  # full pass: the fleet is full
    _finish(db, alice[0])
    _finish(db, bob[0])
    assert {c.job_id for c in other_replica.run_sync(b._place)} == {alice[1], bob[1]}
    _finish(db, alice[1])
    _finish(db, bob[1])
    _fast(a)
    # a's heads are still alice[1] and bob[1]: their claims find them gone, a decides again
    assert {c.job_id for c in db.run_sync(a._place)} == {alice[2], bob[2]}
    assert all(n == 1 for n in _attempts(db).values()), "no job was dispatched twice"


def test_a_job_stopped_elsewhere_is_not_dispatched(db: Database, other_replica: Database, sched: Scheduler) -> None:
    _users(db, "alice")
    alice = _queue(db, "alice", 5)
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]
    other_replica.run_sync(lambda s: jobs.transition(s, jobs.get_job(s, alice[1]), sm.STOPPED, "stopped elsewhere"))
    _finish(db, alice[0])
    _fast(sched)
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[2]]
    assert _state(db, alice[1]).state == sm.STOPPED and _state(db, alice[1]).attempts_count == 0


def test_new_jobs_and_requeued_jobs_are_seen_by_the_fast_pass(db: Database, sched: Scheduler) -> None:
    _users(db, "alice", "bob")
    alice = _queue(db, "alice", 5)
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]

    def fail(s: Session) -> None:
        job = jobs.get_job(s, alice[0])
        attempt = jobs.current_attempt(s, job)
        assert attempt is not None
        jobs.advance(s, job, attempt, sm.RUNNING, "test")
        outcomes.finish_attempt(s, job, attempt, exit_code=1)

    db.run_sync(fail)
    # alice's job 0 is queued again (a retry keeps its seq): it is first in alice's line again
    db.run_sync(lambda s: jobs.transition(s, jobs.get_job(s, alice[0]), sm.QUEUED, "retried"))
    _fast(sched)
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]
    bob = _queue(db, "bob", 1)[0]  # admitted after the full pass
    _finish(db, alice[0])
    _fast(sched)
    assert [c.job_id for c in db.run_sync(sched._place)] == [bob], "bob holds nothing: he goes first"


def test_a_job_whose_backoff_ends_is_seen_without_a_full_pass(
    db: Database, other_replica: Database, sched: Scheduler
) -> None:
    _users(db, "alice", "bob")
    alice = _queue(db, "alice", 5)
    bob = _queue(db, "bob", 1)[0]
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]  # alice's job is older
    until = time.time() + 1.5

    def backoff(s: Session) -> None:  # another replica puts bob's job in backoff: not in our feed
        job = jobs.get_job(s, bob)
        jobs.transition(s, job, sm.STOPPED, "test")
        job.not_before = until
        jobs.transition(s, job, sm.QUEUED, "retry after a backoff")

    other_replica.run_sync(backoff)
    _finish(db, alice[0])
    _fast(sched)
    # bob's head in memory goes first (alice used the fleet); its claim sees the backoff
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[1]]
    assert _state(db, bob).attempts_count == 0
    _finish(db, alice[1])
    while time.time() <= until:
        time.sleep(0.1)
    _fast(sched)
    assert [c.job_id for c in db.run_sync(sched._place)] == [bob], "found by its ended backoff"


def test_an_owner_whose_held_jobs_run_out_is_read_again(
    db: Database, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "PER_OWNER", 2)
    sched = Scheduler(_ctx(db, tmp_path))
    _users(db, "alice", "bob", "carol")
    alice = _queue(db, "alice", 6)
    _queue(db, "bob", 1)
    _queue(db, "carol", 1)
    order = [c.job_id for c in db.run_sync(sched._place)]  # full pass
    for _ in range(7):
        _finish(db, order[-1])
        _fast(sched)
        order += [c.job_id for c in db.run_sync(sched._place)]
    assert [j for j in order if j in alice] == alice, "alice's jobs in her order, past the 2 held"
    assert len(order) == 8 and len(set(order)) == 8


@pytest.mark.parametrize("seed", [1, 2])
def test_the_copy_follows_the_ledger(db: Database, seed: int) -> None:
    """Random changes made in this process; after each round the refreshed heads are those a
    fresh read of the ledger finds."""
    rng = random.Random(seed)
    owners = ["alice", "bob", "carol", "dave"]
    _users(db, *owners)
    cache = heads.HeadCache(db.queue_changes, per_owner=3)
    queued: list[str] = []
    now = time.time()

    def read(s: Session) -> tuple[dict[str, str], dict[str, str]]:
        cache.refresh(s, now)
        fresh = heads.HeadCache(None, per_owner=3)
        fresh.load(s, now)
        # the fast pass's fair order of the held heads is the reference order of a fresh read's
        usage = placement.Usage()
        for owner in rng.sample(owners, 2):
            usage.totals[owner] = rng.choice([0, 1, 8])
            usage.history[owner] = rng.choice([0.0, 5.0])
        ordered = [c.job_id for c in cache.fair_heads(usage)]
        assert ordered == [c.job_id for c in placement._fair_order(fresh.heads(), usage)]
        return {c.owner: c.job_id for c in cache.heads()}, {c.owner: c.job_id for c in fresh.heads()}

    def read_all(s: Session) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        cache.fill(s, now)
        fresh = heads.HeadCache(None, per_owner=3)
        return _by_owner(cache.held()), _by_owner(fresh.load(s, now))

    for _ in range(6):
        queued.extend(db.run_sync(lambda s: [f.job(s, owner=rng.choice(owners)).id for _ in range(4)]))
    db.run_sync(lambda s: cache.load(s, now))
    for _ in range(30):

        def change(s: Session) -> None:
            what = rng.random()
            if what < 0.3 or not queued:
                queued.append(f.job(s, owner=rng.choice(owners), priority=rng.choice([0, 0, 1])).id)
                return
            job = jobs.get_job(s, rng.choice(queued))
            if job.state == sm.QUEUED and what < 0.6:
                f.attempt(s, job)  # dispatched (QUEUED -> SUBMITTED)
            elif job.state == sm.QUEUED:
                jobs.transition(s, job, sm.STOPPED, "stopped")
            elif job.state == sm.STOPPED:
                jobs.transition(s, job, sm.QUEUED, "queued again")

        for _ in range(rng.randint(1, 4)):
            db.run_sync(change)
        held, fresh = db.run_sync(read)
        assert held == fresh
        if rng.random() < 0.3:  # a full pass from memory: every held job is what a full read finds
            held_all, fresh_all = db.run_sync(read_all)
            assert held_all == fresh_all


def _full_passes(
    sched: Scheduler, fresh: Scheduler, now: float, s: Session
) -> tuple[placement.Decision, placement.Decision]:
    """A full pass of `sched` from the heads it holds, and one of `fresh`, which reads the ledger."""
    sched._status_at = 0.0
    memory, full = sched.decide(s, now)
    assert full and sched._ledger_at < now, "the ledger was read less than a minute ago"
    ledger, _ = fresh.decide(s, now)
    return memory, ledger


def _by_owner(candidates: list[placement.Candidate]) -> dict[str, list[str]]:
    """Each owner's candidates in dispatch order (a read's rows come in no particular order)."""
    out: dict[str, list[placement.Candidate]] = {}
    for c in candidates:
        out.setdefault(c.owner, []).append(c)
    return {o: [c.job_id for c in sorted(q, key=lambda c: (-c.priority, c.seq))] for o, q in out.items()}


def test_a_full_pass_from_memory_decides_as_one_from_the_ledger(
    db: Database, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two ledger reads, the full pass (wait reasons, positions, backfill) decides on the
    heads held in memory: the same decision a scheduler reading the ledger afresh makes."""
    rng = random.Random(7)
    monkeypatch.setattr(dispatch, "PER_OWNER", 2)  # owners with more jobs than held: read again
    owners = ["alice", "bob", "carol"]
    _users(db, *owners)
    sched = Scheduler(_ctx(db, tmp_path / "a", fleets=TWO_NODES))
    for _ in range(4):
        for owner in owners:
            _queue(db, owner, rng.randint(1, 4), gpus=rng.choice([1, 4, 8]))
    placed = [c.job_id for c in db.run_sync(sched._place)]  # a full pass from the ledger
    for _ in range(6):
        if placed and rng.random() < 0.5:
            _finish(db, placed.pop(0))
        _queue(db, rng.choice(owners), rng.randint(1, 3), gpus=rng.choice([1, 4, 8]))
        now = time.time()
        fresh = Scheduler(_ctx(db, tmp_path / "b", fleets=TWO_NODES))
        with monkeypatch.context() as clock:  # the same recent usage for both (it grows with time)
            clock.setattr(time, "time", functools.partial(float, now))
            memory, ledger = db.run_sync(functools.partial(_full_passes, sched, fresh, now))
        assert memory == ledger
        placed += [c.job_id for c in db.run_sync(sched._place)]


def test_plain_reads_take_marks_and_raise_as_sqlalchemy(db: Database) -> None:
    """The cycle's plain DBAPI reads (engine.read_rows): `?` marks on both databases, and a
    database error raised as SQLAlchemy's, as the rest of the code expects."""
    assert db.run_sync(lambda s: engine.read_rows(s, "SELECT ? + 1, ?", (41, "x"))) == [(42, "x")]
    with pytest.raises(DBAPIError):
        db.run_sync(lambda s: engine.read_rows(s, "SELECT missing FROM nowhere WHERE a = ?", (1,)))


@pytest.mark.parametrize("big", [True, False])
def test_a_big_queues_wait_records_are_written_as_often_as_their_cost_allows(
    db: Database, sched: Scheduler, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    """With a big queue every position behind a dispatched job changes, so writing them all is
    as long as the queue: a full pass writes them only once STATUS_COST_FACTOR times the last
    write's duration has passed. It still decides and places. A small queue's full passes all
    write, as before."""
    if not big:
        monkeypatch.setattr(dispatch, "FULL_PASS_CANDIDATES", 1_000)
    _users(db, "alice")
    alice = _queue(db, "alice", 6)
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]  # the fleet's 8 GPUs
    assert _state(db, alice[2]).queue_position == 2
    sched._write_cost = 3600.0  # as if that write had taken an hour
    _finish(db, alice[0])
    sched._status_at = 0.0  # a full pass
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[1]], "it still places"
    assert _state(db, alice[2]).queue_position == (2 if big else 1)
    sched._write_cost = 0.0
    sched._status_at = 0.0
    assert db.run_sync(sched._place) == []
    assert _state(db, alice[2]).queue_position == 1, "written once the cost allows"
