"""Submissions queued together (`jobs.create_jobs`, `GroupCommit`), on SQLite and PostgreSQL: a
batch gives every job the position a submission alone would get, keeps idempotency inside the
batch, and one failing item fails only its own caller."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from common import errors
from control.db import models as m
from control.db.engine import Database
from control.db.group_commit import GroupCommit
from control.ledger import jobs
from control.ledger import state_machine as sm
from control.scheduler.dispatch import queue_position
from tests import factories
from tests.integration.ledger.held import behind_a_first, held_first


def _columns(priority: int = 0, queue: str = "default") -> dict[str, object]:
    return dict(
        project="@alice/lab",
        experiment="exp",
        method="custom/custom",
        queue=queue,
        priority=priority,
        series="cpu",
        gpus=0,
        needs="{}",
        eligible_fleets='["local"]',
        runtime_id="",
        pools=b"",
        resolved_config="{}",
        image="host",
        provenance=b"",
        retry_budget=0,
        labels="{}",
        next_cause=1,
    )


def _new(request_id: str = "", priority: int = 0, queue: str = "default", stages: Sequence[str] = ()) -> jobs.NewJob:
    spec = factories.spec()
    spec.then_stages.extend(stages)
    return jobs.NewJob("alice", request_id, spec, _columns(priority, queue))


def test_a_batch_gives_each_job_the_position_a_lone_submission_gets(db: Database) -> None:
    db.run_sync(factories.user)
    db.run_sync(lambda s: [factories.job(s, priority=p) for p in (0, 5, 0)])
    batch = [_new(priority=0), _new(priority=5), _new(priority=0, queue="other"), _new(priority=0, stages=["eval"])]
    queued = db.run_sync(lambda s: jobs.create_jobs(s, batch))
    assert all(q.created for q in queued)

    def counted(s: Session) -> list[int]:
        # what the per-job count (the scheduler's FIFO fallback) says about the stored rows
        return [queue_position(s, jobs.get_job(s, q.job.id)) for q in queued]

    assert [q.queue_position for q in queued] == db.run_sync(counted)
    assert [q.queue_position for q in queued] == [5, 2, 1, 6]  # behind the higher priority of the batch too


def test_a_batch_stores_the_same_rows_and_events_as_one_at_a_time(db: Database) -> None:
    db.run_sync(factories.user)
    (head,) = db.run_sync(lambda s: jobs.create_jobs(s, [_new("r-1", stages=["eval", "export"])]))

    def chain(s: Session) -> list[tuple[str, str, str, float, str]]:
        rows = list(s.scalars(select(m.Job).order_by(m.Job.seq)))
        events = {e.job_id: e for e in s.scalars(select(m.JobEvent))}
        assert len(events) == len(rows) == 3
        assert all(events[r.id].to_state == sm.QUEUED and events[r.id].seq == r.event_seq == 1 for r in rows)
        assert all(r.state == sm.QUEUED for r in rows)
        return [(r.id, r.stage, r.parent_job_id, r.not_before, events[r.id].reason) for r in rows]

    (job, eval_, export) = db.run_sync(chain)
    assert job == (head.job.id, "", "", 0.0, "admitted")
    assert eval_[1:] == ("eval", job[0], jobs.NEVER, f"eval stage of {job[0]}")
    assert export[1:] == ("export", eval_[0], jobs.NEVER, f"export stage of {job[0]}")


def test_retries_of_one_request_in_a_batch_queue_one_job(db: Database) -> None:
    db.run_sync(factories.user)
    first = db.run_sync(lambda s: jobs.create_jobs(s, [_new("again")]))[0]
    batch = [_new("again"), _new("twin"), _new("twin"), _new("")]
    queued = db.run_sync(lambda s: jobs.create_jobs(s, batch))
    assert [q.created for q in queued] == [False, True, False, True]
    assert queued[0].job.id == first.job.id
    assert queued[1].job.id == queued[2].job.id
    total = db.run_sync(lambda s: s.scalar(select(func.count()).select_from(m.Job)))
    assert total == 3


def test_another_users_request_id_is_never_their_job(db: Database) -> None:
    """A request id is the caller's own key: carol sending alice's (guessed or seen) gets a job of
    her own, not alice's, in the same batch as alice's retry or in a later one."""
    db.run_sync(lambda s: [factories.user(s, n) for n in ("alice", "carol")])
    (alices,) = db.run_sync(lambda s: jobs.create_jobs(s, [_new("shared")]))  # _new's owner: alice
    carols = dataclasses.replace(_new("shared"), owner="carol")
    queued = db.run_sync(lambda s: jobs.create_jobs(s, [carols, _new("shared"), carols]))
    assert [q.created for q in queued] == [True, False, False]
    assert queued[0].job.id != alices.job.id and queued[0].job.owner == "carol"
    assert queued[1].job.id == alices.job.id and queued[2].job.id == queued[0].job.id


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_request_id_another_transaction_queued_after_the_lookup_is_that_ones_job(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race between two PostgreSQL transactions (two replicas): the batch looked its request
    ids up before the other transaction's job was there, and its insert meets that job's unique
    key. The batch's inserts (one pipelined round trip, in a savepoint) are undone, it is made
    again one submission at a time, and the retry gets the other transaction's job. (SQLite has
    one writer at a time: the lookup, inside its write transaction, sees every job there is.)"""
    db.run_sync(factories.user)
    (winner,) = db.run_sync(lambda s: jobs.create_jobs(s, [_new("raced")]))
    plan = jobs._plan
    monkeypatch.setattr(jobs, "_plan", lambda batch, first, now, known: plan(batch, first, now, {}))
    queued = db.run_sync(lambda s: jobs.create_jobs(s, [_new("raced"), _new("fresh"), _new("")]))
    assert [q.created for q in queued] == [False, True, True]
    assert queued[0].job.id == winner.job.id
    assert [q.queue_position for q in queued[1:]] == [2, 3]
    rows = db.run_sync(lambda s: sorted(s.scalars(select(m.Job.request_id))))
    assert rows == ["", "fresh", "raced"]


def test_group_commit_answers_each_caller_and_a_bad_item_fails_alone(db: Database) -> None:
    batches: list[int] = []

    def apply(s: Session, items: Sequence[int]) -> list[int]:
        batches.append(len(items))
        if any(i < 0 for i in items):
            raise errors.InvalidArgument(f"negative item in {list(items)}")
        return [i * 2 for i in items]

    gate, held = held_first(apply)
    answers = asyncio.run(behind_a_first(GroupCommit(db, held), gate, 0, [1, 2, -3, 4, 5]))
    assert answers[:2] == [2, 4] and answers[3:] == [8, 10]
    assert isinstance(answers[2], errors.InvalidArgument) and answers[2].message == "negative item in [-3]"
    assert batches == [1, 5, 1, 1, 1, 1, 1]  # the first alone; together; then (it failed) one at a time


def test_group_commit_runs_what_follows_the_commit_before_the_caller_wakes(db: Database) -> None:
    """`then` sees each committed result, before its caller resumes; never an error's."""
    seen: list[tuple[str, int]] = []

    def apply(s: Session, items: Sequence[int]) -> list[int]:
        if any(i < 0 for i in items):
            raise errors.InvalidArgument("negative")
        return list(items)

    async def go() -> list[Any]:
        group: GroupCommit[int, int] = GroupCommit(db, apply)

        async def one(i: int) -> Any:
            try:
                got = await group.submit(i, lambda r: seen.append(("then", r)))
            except errors.InvalidArgument as e:
                return e.message
            seen.append(("woke", got))
            return got

        return await asyncio.gather(*(one(i) for i in [1, -2, 3]))

    assert asyncio.run(go()) == [1, "negative", 3]
    for i in (1, 3):
        assert seen.index(("then", i)) < seen.index(("woke", i))
    assert ("then", -2) not in seen


def test_what_follows_a_commit_runs_even_when_its_caller_gave_up(db: Database) -> None:
    """The item was committed: what must follow (a log line's followers woken) still runs."""
    seen: list[int] = []

    def apply(s: Session, items: Sequence[int]) -> list[int]:
        return list(items)

    gate, held = held_first(apply)

    async def go() -> None:
        group: GroupCommit[int, int] = GroupCommit(db, held)
        caller = asyncio.ensure_future(group.submit(7, seen.append))
        await asyncio.sleep(0)  # submitted: its batch is on the database thread, held there
        caller.cancel()
        gate.set()
        for _ in range(200):
            if seen:
                return
            await asyncio.sleep(0.05)

    asyncio.run(go())
    assert seen == [7]


@pytest.mark.parametrize("n", [1, 7])
def test_reserve_counter_hands_out_disjoint_blocks(db: Database, n: int) -> None:
    firsts = [db.run_sync(lambda s: jobs.reserve_counter(s, f"c{n}", n)) for _ in range(3)]
    assert firsts == [1, 1 + n, 1 + 2 * n]


def test_group_commit_does_not_replay_a_batch_when_the_database_is_unavailable(db: Database) -> None:
    """Its commit may have happened: replaying items one by one could queue a job twice."""
    batches: list[int] = []

    def apply(s: Session, items: Sequence[int]) -> list[int]:
        batches.append(len(items))
        if items == [0]:
            return [0]
        raise errors.Unavailable("the ledger database is unavailable; retry in a moment")

    gate, held = held_first(apply)
    answers = asyncio.run(behind_a_first(GroupCommit(db, held), gate, 0, [1, 2, 3, 4]))
    assert all(isinstance(a, errors.Unavailable) for a in answers)
    assert batches == [1, 4]
