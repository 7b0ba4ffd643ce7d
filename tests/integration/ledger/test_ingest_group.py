"""Several runs' telemetry batches stored in one transaction (`ingest_group.store`, through
`GroupCommit` as the IngestService does), on SQLite and PostgreSQL: each record exactly once and in
order per run, and a bad batch (out of order, another attempt's token, a store that fails) answered
with its own error while the other runs' batches of the same group are stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from sqlalchemy.orm import Session
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from common import errors
from control.db import models as m
from control.db.engine import Database
from control.db.group_commit import GroupCommit
from control.ledger import state_machine as sm
from control.telemetry import ingest, ingest_group, logs
from control.telemetry.bounds import IngestLimits
from control.telemetry.ingest_group import Batch
from tests import factories as f
from tests.integration.ledger.held import behind_a_first, held_first

LIMITS = IngestLimits()


def _runs(db: Database, n: int) -> list[str]:
    """`n` RUNNING attempts, each with its cursor (a first batch stored alone)."""
    ids = db.run_sync(lambda s: [f.attempt(s, f.job(s), to=sm.RUNNING).id for _ in range(n)])
    for aid in ids:
        _first(db, aid, "first")
    return ids


def _first(db: Database, aid: str, line: str) -> None:
    db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(1, line)], scope_attempt_id=aid))


def _texts(db: Database, aid: str) -> list[str]:
    return db.run_sync(lambda s: [r.text for r in logs.after(s, aid.split(".", 1)[0], None)])


def _cursor(db: Database, aid: str) -> tuple[int, int]:
    cur = db.run_sync(lambda s: s.get(m.IngestCursor, aid))
    assert cur is not None
    return cur.acked_seq, cur.next_log_offset


def _store(db: Database, batches: Sequence[Batch], masks: ingest.Masks = ingest._no_mask) -> list[ingest_group.Result]:
    return db.run_sync(lambda s: ingest_group.store(s, batches, masks, LIMITS))


def test_a_group_stores_each_run_in_order_once(db: Database) -> None:
    a, b, c = _runs(db, 3)
    group = [
        Batch(a, [f.log_record(2, "a2"), f.log_record(3, "a3", "a3b")], a),
        Batch(b, [f.metric_record(2, 10, loss=0.5), f.log_record(3, "b3")], b),
        Batch(c, [], c),  # an empty batch: its ack and signal
    ]
    first = _store(db, group)
    assert [r.acked_seq if isinstance(r, ingest.Applied) else r for r in first] == [3, 3, 1]
    assert _texts(db, a) == ["first", "a2", "a3", "a3b"]
    assert _texts(db, b) == ["first", "b3"]
    assert _cursor(db, a) == (3, 4) and _cursor(db, b) == (3, 2) and _cursor(db, c) == (1, 1)
    # the same group again (a stream resumed before its ack): nothing stored twice
    again = _store(db, group)
    assert all(isinstance(r, ingest.Applied) and not r.logs_added and not r.metrics_added for r in again)
    assert _texts(db, a) == ["first", "a2", "a3", "a3b"]
    assert _cursor(db, a) == (3, 4)
    # the job row's log counter moved with the lines
    job = db.run_sync(lambda s: s.get(m.Job, a.split(".")[0]))
    assert job is not None and job.log_bytes == sum(len(t) for t in ["first", "a2", "a3", "a3b"])


def test_a_bad_batch_is_answered_alone_and_the_others_are_stored(db: Database) -> None:
    good, gap, stolen = _runs(db, 3)
    fresh = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.RUNNING).id)
    answers = _store(
        db,
        [
            Batch(gap, [f.log_record(2, "g2"), f.log_record(4, "g4")], gap),  # seq 3 missing
            Batch(stolen, [f.log_record(2, "not mine")], good),  # good's token, another attempt
            Batch(good, [f.log_record(2, "ok")], good),
            Batch(good, [f.log_record(3, "later")], good),  # the same attempt twice: stored alone after
            Batch(fresh, [f.log_record(1, "new")], fresh),  # no cursor yet: stored alone (ORM path)
        ],
    )
    assert isinstance(answers[0], errors.InvalidArgument) and "expected seq 3, got 4" in answers[0].message
    assert isinstance(answers[1], errors.PermissionDenied)
    assert isinstance(answers[2], ingest.Applied) and answers[2].acked_seq == 2
    assert answers[3] is None and answers[4] is None
    assert _texts(db, gap) == ["first"] and _cursor(db, gap) == (1, 1)  # nothing of the bad batch
    assert _texts(db, stolen) == ["first"]
    assert _texts(db, good) == ["first", "ok"]


def test_a_batch_whose_store_fails_fails_only_itself(db: Database) -> None:
    """A failure the checks do not foresee fails the group's transaction; `GroupCommit` then stores
    each batch alone, so the other runs' lines are stored once and acknowledged."""
    runs = _runs(db, 4)
    broken = runs[1]
    group_sizes: list[int] = []

    def masks(s: Session, attempt_id: str, job_id: str) -> Callable[[str], str]:
        if attempt_id == broken:
            raise RuntimeError("the secrets of this job cannot be read")
        return str

    def apply(s: Session, batches: Sequence[Batch]) -> list[ingest_group.Result]:
        group_sizes.append(len(batches))
        return ingest_group.store(s, batches, masks, LIMITS)

    gate, held = held_first(apply)
    batches = [Batch(a, [f.log_record(2, f"line of {a}")], a) for a in runs]
    nobody = Batch("no-such-attempt", [], "no-such-attempt")
    answers = asyncio.run(behind_a_first(GroupCommit(db, held), gate, nobody, batches))
    assert group_sizes == [1, 4, 1, 1, 1, 1]  # the first alone; the four together; then one at a time
    assert isinstance(answers[1], RuntimeError)
    for aid, answer in zip(runs, answers, strict=True):
        if aid != broken:
            assert isinstance(answer, ingest.Applied) and answer.acked_seq == 2
            assert _texts(db, aid) == ["first", f"line of {aid}"]
    assert _texts(db, broken) == ["first"] and _cursor(db, broken) == (1, 1)


def test_two_attempts_of_one_job_share_its_log_counter(db: Database) -> None:
    def two(s: Session) -> tuple[str, str]:
        job = f.job(s)
        first = f.attempt(s, job, to=sm.RUNNING)
        first.state, job.state = sm.FAILED, sm.QUEUED  # a retry; the ended attempt's lines still drain
        return first.id, f.attempt(s, job, to=sm.RUNNING).id

    old, new = db.run_sync(two)
    for aid in (old, new):
        _first(db, aid, "x")
    answers = _store(db, [Batch(old, [f.log_record(2, "abc")], old), Batch(new, [f.log_record(2, "defg")], new)])
    assert all(isinstance(r, ingest.Applied) and r.logs_added == 1 for r in answers)
    job = db.run_sync(lambda s: s.get(m.Job, old.split(".")[0]))
    assert job is not None and job.log_bytes == len("x") * 2 + len("abc") + len("defg")


def test_a_group_is_bounded_in_batches_and_records(db: Database) -> None:
    sizes: list[list[int]] = []

    def apply(s: Session, items: Sequence[int]) -> list[int]:
        sizes.append(list(items))
        return list(items)

    gate, held = held_first(apply)
    group = GroupCommit(db, held, max_batch=3, weigh=lambda n: n, max_weight=10)
    asyncio.run(behind_a_first(group, gate, 0, [4, 4, 4, 20, 1, 1, 1, 1]))
    # 4+4 fit, a third 4 would pass 10; 20 goes alone (at least one); then at most 3 per batch
    assert sizes == [[0], [4, 4], [4], [20], [1, 1, 1], [1]]


def test_records_of_a_group_follow_its_order_of_seqs() -> None:
    ingest_group.check_order("a", [f.log_record(1), f.log_record(2), f.log_record(3)], 1)
    ingest_group.check_order("a", [], 5)
    with pytest.raises(errors.InvalidArgument, match="expected seq 2, got 3"):
        ingest_group.check_order("a", [f.log_record(3), f.log_record(2)], 1)


def test_the_first_batch_goes_alone(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.RUNNING).id)
    assert _store(db, [Batch(aid, [pb.Record(seq=1)], aid)]) == [None]
