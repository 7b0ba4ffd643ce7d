"""Scheduler on SQLite and PostgreSQL: fair share, quotas, windows, drains, queue positions.

These call the real placement-and-claim transaction (`Scheduler._place`); executors are not
involved (claiming writes the attempt and its LaunchRequest, which is what dispatch sends).
"""

from __future__ import annotations

import datetime as dt
import pathlib
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from starforge_api.job.v1 import job_state_pb2 as st

from control import auth
from control.blobstore import BlobStore
from control.capsule_assets import load as load_assets
from control.config import ControlConfig, FleetConfig, InventoryConfig, QuotaConfig
from control.context import Context
from control.db import models as m
from control.db.engine import Database
from control.embedded import ensure_capsule
from control.events import Notifier
from control.executors import ExecutorPool
from control.ledger import jobs, outcomes, platform
from control.ledger import state_machine as sm
from control.scheduler import dispatch
from control.scheduler.dispatch import Scheduler, closed_fleets
from recipes.catalog import load_catalog
from tests import factories as f


def _ctx(db: Database, tmp: pathlib.Path, **cfg: object) -> Context:
    fleets = cfg.pop("fleets", None) or [
        FleetConfig("gpu", "local", "127.0.0.1:9", inventory=[InventoryConfig("h200", 1, 8)])
    ]
    config = ControlConfig(state_dir=tmp, fleets=fleets, **cfg)  # type: ignore[arg-type]
    store = BlobStore(tmp / "blobs")
    executors = ExecutorPool(config.fleets, 5)
    for status in executors.status.values():
        status.reachable = status.ever_reachable = True
    return Context(
        cfg=config,
        db=db,
        store=store,
        catalog=load_catalog(),
        assets=load_assets(ensure_capsule(), store),
        executors=executors,
        notifier=Notifier(),
        verifier=auth.TokenVerifier(db),
        replica_id="test",
        public_address="127.0.0.1:1",
    )


@pytest.fixture
def sched(db: Database, tmp_path: pathlib.Path) -> Iterator[Scheduler]:
    yield Scheduler(_ctx(db, tmp_path))


def _users(db: Database, *names: str) -> None:
    db.run_sync(lambda s: [f.user(s, n) for n in names])


def _queue(db: Database, owner: str, n: int, gpus: int = 8) -> list[str]:
    return db.run_sync(
        lambda s: [f.job(s, owner=owner, series="h200", gpus=gpus, fleets=("gpu",)).id for _ in range(n)]
    )


def _finish(db: Database, job_id: str) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = jobs.get_job(s, job_id)
        a = jobs.current_attempt(s, j)
        assert a is not None
        jobs.advance(s, j, a, sm.RUNNING, "test")
        outcomes.finish_attempt(s, j, a, exit_code=0)

    db.run_sync(go)


def _state(db: Database, job_id: str) -> m.Job:
    return db.run_sync(lambda s: jobs.get_job(s, job_id))


def test_fair_share_one_job_beats_a_backlog(db: Database, sched: Scheduler) -> None:
    _users(db, "alice", "bob")
    alice = _queue(db, "alice", 101)
    placed = db.run_sync(sched._place)
    assert [c.job_id for c in placed] == [alice[0]]  # the fleet (8 GPUs) is now full
    bob = _queue(db, "bob", 1)[0]
    assert db.run_sync(sched._place) == []
    waiting = _state(db, bob)
    assert waiting.wait_reason == st.WAIT_REASON_CAPACITY
    assert waiting.queue_position == 1, "bob is next: alice holds the fleet"
    assert _state(db, alice[1]).queue_position == 2
    _finish(db, alice[0])  # capacity frees
    placed = db.run_sync(sched._place)  # the next scheduling cycle
    assert [c.job_id for c in placed] == [bob]
    assert _state(db, bob).state == sm.SUBMITTED
    assert _state(db, alice[1]).state == sm.QUEUED


def test_priority_goes_before_fair_share(db: Database, sched: Scheduler) -> None:
    _users(db, "alice", "bob")
    low = _queue(db, "bob", 1)[0]
    high = db.run_sync(lambda s: f.job(s, owner="alice", series="h200", gpus=8, fleets=("gpu",), priority=10).id)
    placed = db.run_sync(sched._place)
    assert [c.job_id for c in placed] == [high]
    assert _state(db, low).queue_position == 1


def test_over_quota_waits_then_starts(db: Database, tmp_path: pathlib.Path) -> None:
    ctx = _ctx(
        db,
        tmp_path,
        fleets=[FleetConfig("gpu", "local", "127.0.0.1:9", inventory=[InventoryConfig("h200", 2, 8)])],
        quotas=[QuotaConfig(series="h200", gpus=8, user="*")],
    )
    s = Scheduler(ctx)
    _users(db, "alice")
    first, second = _queue(db, "alice", 2)
    assert [c.job_id for c in db.run_sync(s._place)] == [first]
    job = _state(db, second)
    assert job.state == sm.QUEUED  # waits, is not refused
    assert job.wait_reason == st.WAIT_REASON_QUOTA
    assert job.wait_message == "quota: @alice uses 8 of 8 h200 GPUs; this job needs 8"
    _finish(db, first)
    assert [c.job_id for c in db.run_sync(s._place)] == [second]


def test_project_quota(db: Database, tmp_path: pathlib.Path) -> None:
    ctx = _ctx(
        db,
        tmp_path,
        fleets=[FleetConfig("gpu", "local", "127.0.0.1:9", inventory=[InventoryConfig("h200", 4, 8)])],
        quotas=[QuotaConfig(series="h200", gpus=8, project="@alice/lab")],
    )
    s = Scheduler(ctx)
    _users(db, "alice")
    first, second = _queue(db, "alice", 2)
    db.run_sync(s._place)
    assert _state(db, second).wait_message == "quota: project @alice/lab uses 8 of 8 h200 GPUs; this job needs 8"


def test_capacity_wait_says_why(db: Database, sched: Scheduler) -> None:
    _users(db, "alice")
    big = db.run_sync(lambda s: f.job(s, owner="alice", series="h200", gpus=8, fleets=("gpu",)).id)
    other = _queue(db, "alice", 1)[0]
    db.run_sync(sched._place)
    assert _state(db, big).state == sm.SUBMITTED
    assert _state(db, other).wait_message == "capacity: fleet gpu has 0 free h200 of the 8 needed"


def test_closed_window_waits_and_stops_running_jobs(db: Database, tmp_path: pathlib.Path) -> None:
    now = dt.datetime.now(dt.UTC)
    closed_window = f"{(now.hour + 2) % 24:02d}:00-{(now.hour + 3) % 24:02d}:00"
    ctx = _ctx(
        db,
        tmp_path,
        fleets=[
            FleetConfig("gpu", "local", "127.0.0.1:9", inventory=[InventoryConfig("h200", 1, 8)], window=closed_window)
        ],
    )
    s = Scheduler(ctx)
    _users(db, "alice")
    job = _queue(db, "alice", 1)[0]
    assert db.run_sync(s._place) == []
    row = _state(db, job)
    assert row.wait_reason == st.WAIT_REASON_WINDOW
    assert row.wait_message == f"window: fleet gpu runs jobs only {closed_window}"

    # a job that runs when the window closes is stopped, then queued again when it opens
    def running(sess):  # type: ignore[no-untyped-def]
        j = f.job(sess, owner="alice", series="h200", gpus=8, fleets=("gpu",))
        f.attempt(sess, j, fleet="gpu", to=sm.RUNNING)
        return j.id

    rid = db.run_sync(running)
    stops = db.run_sync(lambda sess: platform.request_stops(sess, closed_fleets(sess, ctx)))
    assert [a for a, _ in stops] == [f"{rid}.1"]

    def exited(sess):  # type: ignore[no-untyped-def]
        j = jobs.get_job(sess, rid)
        a = jobs.current_attempt(sess, j)
        assert a is not None
        outcomes.finish_attempt(sess, j, a, exit_code=143, signal=15)
        return j.state, j.stopped_by

    assert db.run_sync(exited) == (sm.STOPPED, platform.WINDOW)
    assert db.run_sync(lambda sess: platform.requeue(sess, closed_fleets(sess, ctx))) == []  # still closed
    assert db.run_sync(lambda sess: platform.requeue(sess, {})) == [rid]  # the window opened
    assert _state(db, rid).state == sm.QUEUED


def test_drain_pauses_and_requeues(db: Database, sched: Scheduler) -> None:
    _users(db, "alice")

    def running(sess):  # type: ignore[no-untyped-def]
        j = f.job(sess, owner="alice", series="h200", gpus=8, fleets=("gpu",))
        f.attempt(sess, j, fleet="gpu", to=sm.RUNNING)
        sess.add(m.FleetState(name="gpu", state=2, reason="firmware", updated_at=0))
        return j.id

    rid = db.run_sync(running)
    closed = db.run_sync(lambda sess: closed_fleets(sess, sched.ctx))
    assert closed == {"gpu": (st.WAIT_REASON_DRAIN, "fleet gpu is drained (firmware)")}
    db.run_sync(lambda sess: platform.request_stops(sess, closed))

    def exited(sess):  # type: ignore[no-untyped-def]
        j = jobs.get_job(sess, rid)
        a = jobs.current_attempt(sess, j)
        assert a is not None
        outcomes.finish_attempt(sess, j, a, exit_code=143, signal=15)
        return j.state

    assert db.run_sync(exited) == sm.PAUSED
    assert db.run_sync(lambda sess: platform.requeue(sess, closed)) == [rid]
    db.run_sync(sched._place)
    row = _state(db, rid)
    assert (row.state, row.wait_reason) == (sm.QUEUED, st.WAIT_REASON_DRAIN)


def test_claim_writes_attempt_token_and_launch(db: Database, sched: Scheduler) -> None:
    _users(db, "alice")
    job = _queue(db, "alice", 1)[0]
    [claimed] = db.run_sync(sched._place)
    att = db.run_sync(lambda s: s.get(m.Attempt, claimed.attempt_id))
    assert att is not None
    assert att.state == sm.SUBMITTED and att.launch and att.capsule_digest
    tokens = db.run_sync(lambda s: list(s.scalars(select(m.Token).where(m.Token.job_id == job))))
    assert [t.kind for t in tokens] == ["run"]


@pytest.fixture
def big_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a handful of candidates a "big queue": cycles take the fast pass on heads of line."""
    monkeypatch.setattr(dispatch, "FULL_PASS_CANDIDATES", 3)


def test_big_queue_fast_pass_keeps_fair_share(db: Database, sched: Scheduler, big_queue: None) -> None:
    _users(db, "alice", "bob")
    alice = _queue(db, "alice", 20)
    decision, full = db.run_sync(lambda s: sched.decide(s, time.time()))
    assert full and len(decision.waiting) == 19, "the first cycle is a full pass"
    assert [c.job_id for c in db.run_sync(sched._place)] == [alice[0]]
    bob = _queue(db, "bob", 1)[0]
    decision, full = db.run_sync(lambda s: sched.decide(s, time.time()))
    assert not full and decision.placed == [] and decision.waiting == {}, "fleet full: the fast pass stops at once"
    _finish(db, alice[0])
    decision, full = db.run_sync(lambda s: sched.decide(s, time.time()))
    assert not full and decision.placed == [(bob, "gpu")], "bob's one job goes before alice's backlog"
    assert [c.job_id for c in db.run_sync(sched._place)] == [bob]
    # wait reasons and positions are refreshed by a full pass once they are STATUS_REFRESH_SECONDS old
    sched._status_at -= dispatch.STATUS_REFRESH_SECONDS
    assert db.run_sync(sched._place) == []
    assert _state(db, alice[1]).queue_position == 1 and _state(db, alice[1]).wait_reason == st.WAIT_REASON_CAPACITY
    assert _state(db, alice[19]).queue_position == 19


def test_big_queue_backfills_behind_a_head_that_does_not_fit(db: Database, sched: Scheduler, big_queue: None) -> None:
    _users(db, "alice")
    small = _queue(db, "alice", 5, gpus=4)
    assert [c.job_id for c in db.run_sync(sched._place)] == small[:2]  # a full pass; the queue is "big" now
    _finish(db, small[0])
    _finish(db, small[1])
    # alice's head of line from now on: a job that cannot fit the fleet's one node of 8 GPUs
    huge = db.run_sync(lambda s: f.job(s, owner="alice", series="h200", gpus=16, fleets=("gpu",), priority=1).id)
    decision, full = db.run_sync(lambda s: sched.decide(s, time.time()))
    assert full, "the head waits while GPUs are free: the cycle looks behind it"
    assert decision.placed == [(small[2], "gpu"), (small[3], "gpu")]
    assert decision.waiting[huge][0] == st.WAIT_REASON_CAPACITY
