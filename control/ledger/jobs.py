"""Job and attempt rows: creation, transitions and the event log. Sync, called inside a session.

`transition` is the only function that changes a job's or an attempt's state; it checks the state
machine, stamps times, appends a JobEvent and bumps the job's event sequence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from starforge.job.v1 import job_state_pb2 as st

from common import errors
from control.db import models as m
from control.ledger import state_machine as sm


@dataclass(frozen=True)
class Transition:
    """What happened, for notifications after commit."""

    job_id: str
    attempt_id: str
    from_state: int
    to_state: int
    reason: str


def get_job(s: Session, job_id: str, *, for_update: bool = False) -> m.Job:
    stmt = select(m.Job).where(m.Job.id == job_id)
    if for_update:
        stmt = stmt.with_for_update()
    job = s.scalars(stmt).one_or_none()
    if job is None:
        raise errors.NotFound(f"job {job_id} not found")
    return job


def get_attempt(s: Session, attempt_id: str, *, for_update: bool = False) -> m.Attempt:
    stmt = select(m.Attempt).where(m.Attempt.id == attempt_id)
    if for_update:
        stmt = stmt.with_for_update()
    att = s.scalars(stmt).one_or_none()
    if att is None:
        raise errors.NotFound(f"attempt {attempt_id} not found")
    return att


def current_attempt(s: Session, job: m.Job) -> m.Attempt | None:
    if job.attempts_count == 0:
        return None
    return s.scalars(
        select(m.Attempt).where(m.Attempt.job_id == job.id, m.Attempt.number == job.attempts_count)
    ).one_or_none()


def attempts_of(s: Session, job_id: str) -> list[m.Attempt]:
    return list(s.scalars(select(m.Attempt).where(m.Attempt.job_id == job_id).order_by(m.Attempt.number)))


def transition(
    s: Session,
    job: m.Job,
    to_state: int,
    reason: str,
    *,
    attempt: m.Attempt | None = None,
    now: float | None = None,
) -> Transition:
    """Move `job` (and `attempt`, for attempt-level states) to `to_state`, recording an event."""
    now = time.time() if now is None else now
    sm.check(job.state, to_state, f"job {job.id}")
    from_state = job.state
    if attempt is not None and to_state != sm.QUEUED:
        sm.check(attempt.state, to_state, f"attempt {attempt.id}")
        attempt.state = to_state
        if to_state == sm.RUNNING and attempt.started_at is None:
            attempt.started_at = now
        if to_state in sm.TERMINAL or to_state == sm.PAUSED:
            attempt.ended_at = now
            if not attempt.reason:
                attempt.reason = reason
    job.state = to_state
    job.updated_at = now
    if to_state == sm.RUNNING and job.started_at is None:
        job.started_at = now
    if to_state in sm.TERMINAL or to_state == sm.PAUSED:
        job.ended_at = now
    if to_state == sm.QUEUED:
        job.ended_at = None
        job.diagnosis = b""
        job.stopped_by = ""
    if to_state != sm.QUEUED:
        job.wait_reason = st.WAIT_REASON_UNSPECIFIED
        job.wait_message = ""
    job.queue_position = 0
    if to_state in sm.TERMINAL or to_state in (sm.PAUSED, sm.QUEUED):
        job.desired = ""
    job.event_seq += 1
    s.add(
        m.JobEvent(
            job_id=job.id,
            seq=job.event_seq,
            attempt_id=attempt.id if attempt is not None else "",
            from_state=from_state,
            to_state=to_state,
            at=now,
            reason=reason,
        )
    )
    return Transition(job.id, attempt.id if attempt else "", from_state, to_state, reason)


def advance(
    s: Session, job: m.Job, attempt: m.Attempt, target: int, reason: str, *, now: float | None = None
) -> list[Transition]:
    """Walk job and attempt forward to `target` through implied states (see state_machine.path_to)."""
    if attempt.state != job.state:
        # The job moved on (e.g. resumed) while this attempt is stale: only the attempt changes.
        for state in sm.path_to(attempt.state, target):
            sm.check(attempt.state, state, f"attempt {attempt.id}")
            attempt.state = state
            if state in sm.TERMINAL or state == sm.PAUSED:
                attempt.ended_at = now or time.time()
        return []
    return [transition(s, job, state, reason, attempt=attempt, now=now) for state in sm.path_to(job.state, target)]


def next_counter(s: Session, name: str) -> int:
    """Increment and return a named counter: one atomic upsert, row-locked until commit on
    PostgreSQL. (A read-then-insert let two concurrent first submissions both insert the row on
    PostgreSQL, and one failed with a unique violation; found by the admission benchmark.)"""
    upsert = pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = (
        upsert(m.Counter)
        .values(name=name, value=1)
        .on_conflict_do_update(index_elements=[m.Counter.name], set_={"value": m.Counter.value + 1})
        .returning(m.Counter.value)
    )
    return int(s.execute(stmt).scalar_one())


SET_WAIT_CHUNK = 10_000


def set_wait(s: Session, waiting: dict[str, tuple[int, str, int]]) -> None:
    """Record why QUEUED jobs wait (reason, message, position); only touches jobs still QUEUED
    whose record changes."""
    if not waiting:
        return
    ids = list(waiting)
    current: dict[str, tuple[int, str, int]] = {}
    # in chunks: one statement takes at most 65,535 parameters on PostgreSQL (a big queue has more)
    for i in range(0, len(ids), SET_WAIT_CHUNK):
        current.update(
            (r.id, (r.wait_reason, r.wait_message, r.queue_position))
            for r in s.execute(
                select(m.Job.id, m.Job.wait_reason, m.Job.wait_message, m.Job.queue_position).where(
                    m.Job.id.in_(ids[i : i + SET_WAIT_CHUNK]), m.Job.state == sm.QUEUED
                )
            )
        )
    changed = [
        {"b_id": job_id, "b_reason": value[0], "b_message": value[1], "b_position": value[2]}
        for job_id, value in waiting.items()
        if job_id in current and current[job_id] != value
    ]
    if changed:  # one executemany: when the queue moves, every position behind it changes
        jobs_table = m.Job.metadata.tables[m.Job.__tablename__]
        s.connection().execute(
            update(jobs_table)
            .where(jobs_table.c.id == bindparam("b_id"), jobs_table.c.state == sm.QUEUED)
            .values(
                wait_reason=bindparam("b_reason"),
                wait_message=bindparam("b_message"),
                queue_position=bindparam("b_position"),
            ),
            changed,
        )
