"""Job and attempt rows: creation, transitions and the event log. Sync, called inside a session.

`create_job` is the only function that creates jobs (and their first events); it is idempotent
per (owner, request_id). `transition` is the only function that changes a job's state, and
`advance` the only one that walks an attempt forward along implied states; both check the state
machine and append a JobEvent for every change. `request` records what was asked of a running
job (stop, pause: the contract's DesiredState).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starforge.job.v1 import job_spec_pb2
from starforge.job.v1 import job_state_pb2 as st

from common import errors, ids
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
        job.desired = sm.NO_REQUEST
    _record(s, job, attempt.id if attempt is not None else "", from_state, to_state, reason, now)
    return Transition(job.id, attempt.id if attempt else "", from_state, to_state, reason)


def _record(
    s: Session,
    job: m.Job,
    attempt_id: str,
    from_state: int,
    to_state: int,
    reason: str,
    now: float,
    *,
    attempt_only: bool = False,
) -> None:
    """Append the job's next event."""
    job.event_seq += 1
    s.add(
        m.JobEvent(
            job_id=job.id,
            seq=job.event_seq,
            attempt_id=attempt_id,
            from_state=from_state,
            to_state=to_state,
            at=now,
            reason=reason,
            attempt_only=attempt_only,
        )
    )


def advance(
    s: Session, job: m.Job, attempt: m.Attempt, target: int, reason: str, *, now: float | None = None
) -> list[Transition]:
    """Walk job and attempt forward to `target` along the shortest legal path (state_machine.path_to)."""
    now = time.time() if now is None else now
    if attempt.state != job.state or attempt.number != job.attempts_count:
        _advance_stale(s, job, attempt, target, reason, now)
        return []
    return [transition(s, job, state, reason, attempt=attempt, now=now) for state in sm.path_to(job.state, target)]


def _advance_stale(s: Session, job: m.Job, attempt: m.Attempt, target: int, reason: str, now: float) -> None:
    """The job moved on (e.g. was resumed) while this attempt is stale: only the attempt changes,
    and each change is still an event of the job's log (marked attempt_only)."""
    for state in sm.path_to(attempt.state, target):
        from_state = attempt.state
        attempt.state = state
        if state == sm.RUNNING and attempt.started_at is None:
            attempt.started_at = now
        if state in sm.TERMINAL or state == sm.PAUSED:
            attempt.ended_at = now
        _record(
            s,
            job,
            attempt.id,
            from_state,
            state,
            f"attempt {attempt.id} (no longer current): {reason}",
            now,
            attempt_only=True,
        )


# -- creation --------------------------------------------------------------------------------------


def _by_request(s: Session, owner: str, request_id: str) -> m.Job | None:
    return s.scalars(select(m.Job).where(m.Job.owner == owner, m.Job.request_id == request_id)).one_or_none()


def create_job(
    s: Session,
    *,
    owner: str,
    request_id: str,
    spec: job_spec_pb2.JobSpec,
    columns: Mapping[str, Any],
    now: float | None = None,
) -> m.Job:
    """Queue a job (and one job per `spec.then_stages` stage, each waiting on the one before) and
    record their first events; `columns` are the admitted values the stages share.

    Idempotent per (owner, request_id): a retry of a submission returns the job the first one
    created. Two retries racing (PostgreSQL, or two replicas) both insert; the unique index lets
    one win, and the loser's insert is rolled back to its savepoint and the winner's job returned.
    """
    now = time.time() if now is None else now
    if not request_id:
        return _insert_chain(s, owner, "", spec, columns, now)
    existing = _by_request(s, owner, request_id)
    if existing is not None:
        return existing
    try:
        with s.begin_nested():
            return _insert_chain(s, owner, request_id, spec, columns, now)
    except IntegrityError:
        existing = _by_request(s, owner, request_id)
        if existing is None:
            raise  # some other constraint: a bug, not a race
        return existing


def _insert_chain(
    s: Session, owner: str, request_id: str, spec: job_spec_pb2.JobSpec, columns: Mapping[str, Any], now: float
) -> m.Job:
    job = _insert_job(
        s,
        owner,
        spec,
        columns,
        now,
        request_id=request_id,
        wait=(st.WAIT_REASON_PRIORITY, "waiting for the scheduler"),
        reason="admitted",
    )
    parent = job
    for stage in spec.then_stages:
        stage_spec = job_spec_pb2.JobSpec()
        stage_spec.CopyFrom(spec)
        del stage_spec.then_stages[:]
        parent = _insert_job(
            s,
            owner,
            stage_spec,
            columns,
            now,
            parent=parent,
            stage=stage,
            wait=(st.WAIT_REASON_DEPENDENCY, f"waiting for {parent.stage or 'training'} job {parent.id} to succeed"),
            reason=f"{stage} stage of {job.id}",
        )
    s.flush()  # a duplicate request_id fails here, inside the caller's savepoint
    return job


def _insert_job(
    s: Session,
    owner: str,
    spec: job_spec_pb2.JobSpec,
    columns: Mapping[str, Any],
    now: float,
    *,
    wait: tuple[int, str],
    reason: str,
    request_id: str = "",
    parent: m.Job | None = None,
    stage: str = "",
) -> m.Job:
    job = m.Job(
        id=ids.new_job_id(),
        owner=owner,
        state=sm.QUEUED,
        desired=sm.NO_REQUEST,
        spec=spec.SerializeToString(),
        request_id=request_id,
        parent_job_id=parent.id if parent is not None else "",
        stage=stage,
        not_before=NEVER if parent is not None else 0.0,
        wait_reason=wait[0],
        wait_message=wait[1],
        seq=next_counter(s, "job_seq"),
        created_at=now,
        updated_at=now,
        event_seq=0,
        **columns,
    )
    s.add(job)
    _record(s, job, "", st.JOB_STATE_UNSPECIFIED, sm.QUEUED, reason, now)
    return job


NEVER = 1e18  # not_before of a stage whose parent has not succeeded (pipeline.on_end releases it)


def new_attempt(s: Session, job: m.Job, fleet: str, reason: str, *, now: float, **columns: Any) -> m.Attempt:
    """The job's next attempt, dispatched: the job and the attempt go QUEUED -> SUBMITTED."""
    number = job.attempts_count + 1
    attempt = m.Attempt(
        id=ids.attempt_id(job.id, number),
        job_id=job.id,
        number=number,
        state=sm.QUEUED,
        fleet=fleet,
        created_at=now,
        **columns,
    )
    s.add(attempt)
    job.attempts_count = number
    job.fleet = fleet
    transition(s, job, sm.SUBMITTED, reason, attempt=attempt, now=now)
    return attempt


# -- requests (DesiredState) -----------------------------------------------------------------------


def request(s: Session, job: m.Job, wanted: int) -> bool:
    """Ask a job with an active attempt to stop or pause; False when that is already asked."""
    if job.desired == wanted:
        return False
    sm.check_request(job.desired, wanted, f"job {job.id}")
    job.desired = wanted
    return True


def requested(job: m.Job) -> int:
    """The state the job was asked to end in (STOPPED, PAUSED), or 0 when nothing was asked."""
    return sm.DESIRED_TARGET.get(job.desired, 0)


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
