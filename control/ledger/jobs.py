"""Job and attempt rows: creation, transitions and the event log. Sync, called inside a session.

`create_jobs` (and `create_job`, for one) is the only function that creates jobs (and their first
events); it is idempotent per (owner, request_id). `transition` is the only function that changes a job's state, and
`advance` the only one that walks an attempt forward along implied states; both check the state
machine and append a JobEvent for every change. `request` records what was asked of a running
job (stop, pause: the contract's DesiredState).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, ids
from control.db import changes, engine
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


def job_state(s: Session, job_id: str) -> int:
    """The job's state alone (one column, no ORM object: followers poll it)."""
    state: int | None = s.execute(select(m.Job.state).where(m.Job.id == job_id)).scalar_one_or_none()
    if state is None:
        raise errors.NotFound(f"job {job_id} not found")
    return state


def job_owner(s: Session, job_id: str) -> str:
    """The job's owner alone (one column, no ORM object)."""
    owner: str | None = s.execute(select(m.Job.owner).where(m.Job.id == job_id)).scalar_one_or_none()
    if owner is None:
        raise errors.NotFound(f"job {job_id} not found")
    return owner


def attempt_state_and_desired(s: Session, attempt_id: str) -> tuple[int, int]:
    """(the attempt's state, its job's desired state), in one query of two columns."""
    found = attempts_state_and_desired(s, [attempt_id])
    if not found:
        raise errors.NotFound(f"attempt {attempt_id} not found")
    return found[0][1], found[0][2]


def attempts_state_and_desired(s: Session, attempt_ids: Sequence[str]) -> list[tuple[str, int, int]]:
    """(attempt id, its state, its job's desired state) of each of `attempt_ids` that exists."""
    stmt = select(m.Attempt.id, m.Attempt.state, m.Job.desired).join(m.Job, m.Job.id == m.Attempt.job_id)
    return [(a, state, desired) for a, state, desired in s.execute(stmt.where(m.Attempt.id.in_(attempt_ids)))]


def log_heads(s: Session, job_ids: Sequence[str]) -> list[tuple[str, int, tuple[int, int] | None]]:
    """(job id, state, (attempt number, offset) of the newest line of its current attempt or None)
    of each of `job_ids` that exists: two queries of a few columns, whatever their number."""
    rows = s.execute(select(m.Job.id, m.Job.state, m.Job.attempts_count).where(m.Job.id.in_(job_ids))).all()
    current = {ids.attempt_id(job_id, n): job_id for job_id, _, n in rows if n > 0}
    next_offset: dict[str, tuple[int, int]] = {}
    if current:
        cur = select(m.IngestCursor.attempt_id, m.IngestCursor.attempt_number, m.IngestCursor.next_log_offset)
        for attempt_id, number, offset in s.execute(cur.where(m.IngestCursor.attempt_id.in_(list(current)))):
            next_offset[current[attempt_id]] = (number, offset)
    out: list[tuple[str, int, tuple[int, int] | None]] = []
    for job_id, state, _ in rows:
        number, offset = next_offset.get(job_id, (0, 0))
        out.append((job_id, state, (number, offset - 1) if offset > 0 else None))
    return out


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
    if sm.QUEUED in (from_state, to_state):
        changes.note(s, job.id)  # the scheduler's heads of line re-read it after the commit
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


@dataclass(frozen=True)
class NewJob:
    """One admitted submission to queue: `columns` are the admitted values its stages share."""

    owner: str
    request_id: str
    spec: job_spec_pb2.JobSpec
    columns: Mapping[str, Any]


@dataclass(frozen=True)
class Queued:
    """What `create_jobs` did with one submission: the job (new, or the one an earlier try of the
    same request id queued) and, for a new job, its 1-based position in its queue. A new job is
    its inserted row with the Job's attribute names, not an ORM instance of the session: read it,
    never change it or add it to a session."""

    job: m.Job
    created: bool
    queue_position: int = 0


def create_job(
    s: Session,
    *,
    owner: str,
    request_id: str,
    spec: job_spec_pb2.JobSpec,
    columns: Mapping[str, Any],
    now: float | None = None,
) -> m.Job:
    """Queue one job (see `create_jobs`)."""
    return create_jobs(s, [NewJob(owner, request_id, spec, columns)], now=now)[0].job


def create_jobs(s: Session, batch: Sequence[NewJob], *, now: float | None = None) -> list[Queued]:
    """Queue each submission's job (and one job per `spec.then_stages` stage, each waiting on the
    one before) and record their first events, in the caller's transaction.

    Idempotent per (owner, request_id): a retry of a submission returns the job the first one
    created, also when both are in this batch. On PostgreSQL two retries racing in different
    transactions (two replicas) both insert; the unique index lets one win, the batch's inserts
    are rolled back to their savepoint and made again one submission at a time, and the loser
    gets the winner's job. SQLite has one writer at a time, and the batch looks its request ids up
    inside its write transaction (begun by the counter): what it finds is all there is, so it
    takes no savepoint.

    The rows are written with Core inserts (one executemany per table for the batch), the
    `job_seq` numbers taken as one block (one counter update per batch; on SQLite it also begins
    the write transaction before any savepoint), and queue positions counted once per (queue,
    priority) of the batch rather than once per job.
    """
    now = time.time() if now is None else now
    if engine.pipelines(s):
        return _create_pipelined(s, batch, now)
    first_seq = reserve_counter(s, "job_seq", sum(1 + len(item.spec.then_stages) for item in batch))
    plans = _plan(batch, first_seq, now, _known_requests(s, batch))
    racing = s.get_bind().dialect.name != "sqlite" and any(item.request_id for item in batch)
    try:
        with s.begin_nested() if racing else contextlib.nullcontext():
            _insert_rows(s, [row for p in plans for row in p.chain], [r for p in plans for r in p.reasons], now)
    except IntegrityError:
        if not racing:
            raise  # some other constraint: a bug, not a race
        plans = _insert_each(s, plans, now)
    return _queued(s, plans)


def _create_pipelined(s: Session, batch: Sequence[NewJob], now: float) -> list[Queued]:
    """`create_jobs` on PostgreSQL in two round trips besides the transaction's own (`engine.pipeline`):
    the `job_seq` block with the batch's request ids already queued, then the inserts (in a
    savepoint when the batch has request ids) with the counts of jobs ahead. One round trip per
    statement was five to eight of them, each ~4 ms in a submission storm."""
    sql = _driver_sql(s)
    total = sum(1 + len(item.spec.then_stages) for item in batch)
    wanted = _wanted(batch)
    counter, *found = engine.pipeline(
        s,
        [engine.Piped(sql.counter, {"name": "job_seq", "n": total})]
        + [
            engine.Piped(sql.known, {"owner": owner, "request_ids": sorted(ids)}, replan=True)
            for owner, ids in wanted.items()
        ],
    )
    known = {
        (owner, request_id): job_id for owner, rows in zip(wanted, found, strict=True) for request_id, job_id in rows
    }
    plans = _plan(batch, int(counter[0][0]) - total + 1, now, known)
    rows = [row for p in plans for row in p.chain]
    groups = _groups(rows)
    calls: list[engine.Piped] = []
    if rows:
        calls.append(engine.Piped(sql.insert_job, [sql.job_params(row) for row in rows]))
        calls.append(
            engine.Piped(
                sql.insert_event,
                [sql.event_params(e) for e in _first_events(rows, [r for p in plans for r in p.reasons], now)],
            )
        )
    for (queue, priority), members in groups.items():
        counted = {"queue": queue, "priority": priority, "seq": int(members[0]["seq"]), "most": AHEAD_COUNTED}
        calls.append(engine.Piped(sql.ahead, {**sql.ahead_defaults, **counted}, replan=True))
    if not calls:  # every submission was an earlier one's retry
        return _queued(s, plans, {})
    try:
        results = engine.pipeline(s, calls, savepoint=bool(wanted))
    except IntegrityError:
        if not wanted:
            raise  # some other constraint: a bug, not a race
        return _queued(s, _insert_each(s, plans, now))
    counts = results[len(calls) - len(groups) :]
    ahead = {key: _counted(int(r[0][0])) for key, r in zip(groups, counts, strict=True)}
    return _queued(s, plans, _numbered(groups, ahead))


@dataclass(frozen=True)
class _DriverSql:
    """create_jobs' statements in the driver's own SQL (for `engine.pipeline`), compiled once per
    dialect from the Core statements the other path runs, with the columns' bind processing."""

    counter: str
    known: str
    insert_job: str
    insert_event: str
    ahead: str
    ahead_defaults: dict[str, Any]
    job_binds: dict[str, Callable[[Any], Any]]
    event_binds: dict[str, Callable[[Any], Any]]

    def job_params(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return _bound(row, self.job_binds)

    def event_params(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return _bound(row, self.event_binds)


def _bound(row: Mapping[str, Any], binds: Mapping[str, Callable[[Any], Any]]) -> dict[str, Any]:
    out = dict(row)
    for key, process in binds.items():
        out[key] = process(out[key])
    return out


def _driver_sql(s: Session) -> _DriverSql:
    dialect = s.get_bind().dialect
    found = _DRIVER_SQL.get(dialect.name)
    if found is not None:
        return found
    events = _table(m.JobEvent)
    ahead = _AHEAD.compile(dialect=dialect)

    def binds(table: Table) -> dict[str, Callable[[Any], Any]]:
        out: dict[str, Callable[[Any], Any]] = {}
        for column in table.columns:
            process = column.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                out[column.key] = process
        return out

    found = _DRIVER_SQL[dialect.name] = _DriverSql(
        counter=str(_counter_upsert(pg_insert).compile(dialect=dialect)),
        known=_KNOWN_ONE_BY_ONE,
        insert_job=str(_INSERT_JOB.compile(dialect=dialect, column_keys=list(_JOB_DEFAULTS))),
        insert_event=str(_INSERT_EVENT.compile(dialect=dialect, column_keys=[c.key for c in events.columns])),
        ahead=str(ahead),
        ahead_defaults=dict(ahead.params),
        job_binds=binds(_JOBS),
        event_binds=binds(events),
    )
    return found


_DRIVER_SQL: dict[str, _DriverSql] = {}
# The batch's request ids already queued, each looked up in the (owner, request_id) index: a
# LATERAL subquery with a LIMIT is run once per id, whatever the statistics say. The plain
# `request_id = ANY(...)` was planned as the index by owner alone with the ids as a filter
# whenever the statistics did not know the owner had many jobs (a young ledger, one user's
# storm): every job of the owner read per batch. It is also planned at every run (`replan`).
_KNOWN_ONE_BY_ONE = (
    "SELECT r.request_id, j.id FROM unnest(%(request_ids)s::varchar[]) AS r(request_id) "
    "CROSS JOIN LATERAL (SELECT jobs.id FROM jobs WHERE jobs.owner = %(owner)s "
    "AND jobs.request_id = r.request_id LIMIT 1) AS j"
)


@dataclass
class _Plan:
    """A submission's rows to insert (`chain`: the job, then its stages), or the job that an
    earlier submission of its request id queued (`existing`)."""

    item: NewJob
    chain: list[dict[str, Any]]
    reasons: list[str]  # of each chain row's first event
    existing: str = ""


def _plan(batch: Sequence[NewJob], first_seq: int, now: float, known: dict[tuple[str, str], str]) -> list[_Plan]:
    """Each submission's rows, numbered from `first_seq`, or the job its request id already
    queued (`known`: (owner, request_id) -> job id)."""
    seq = first_seq
    plans = []
    for item in batch:
        key = (item.owner, item.request_id)
        if item.request_id and key in known:
            plans.append(_Plan(item, [], [], existing=known[key]))
            continue
        chain, reasons = _chain_rows(item, seq, now)
        seq += len(chain)
        if item.request_id:
            known[key] = chain[0]["id"]
        plans.append(_Plan(item, chain, reasons))
    return plans


def _wanted(batch: Sequence[NewJob]) -> dict[str, set[str]]:
    """The batch's request ids, by owner."""
    wanted: dict[str, set[str]] = {}
    for item in batch:
        if item.request_id:
            wanted.setdefault(item.owner, set()).add(item.request_id)
    return wanted


def _known_requests(s: Session, batch: Sequence[NewJob]) -> dict[tuple[str, str], str]:
    """(owner, request_id) -> job id, for the batch's request ids already queued."""
    found: dict[tuple[str, str], str] = {}
    conn = s.connection()
    for owner, request_ids in _wanted(batch).items():
        rows = conn.execute(_KNOWN_REQUESTS, {"owner": owner, "request_ids": sorted(request_ids)})
        found.update(((owner, request_id), job_id) for request_id, job_id in rows)
    return found


def _insert_each(s: Session, plans: list[_Plan], now: float) -> list[_Plan]:
    """The batch again, one savepoint per submission: another transaction queued one of its
    request ids after this one looked."""
    out = []
    for plan in plans:
        item = plan.item
        if not plan.chain:
            winner = _by_request(s, item.owner, item.request_id)
            if winner is None:  # its twin earlier in this batch was inserted or lost to another job
                raise errors.Internal(f"the job of request {item.request_id} vanished")
            out.append(_Plan(item, [], [], existing=winner.id))
            continue
        try:
            with s.begin_nested():
                _insert_rows(s, plan.chain, plan.reasons, now)
            out.append(plan)
        except IntegrityError:
            winner = _by_request(s, item.owner, item.request_id) if item.request_id else None
            if winner is None:
                raise  # some other constraint: a bug, not a race
            out.append(_Plan(item, [], [], existing=winner.id))
    return out


def _by_request(s: Session, owner: str, request_id: str) -> m.Job | None:
    return s.scalars(select(m.Job).where(m.Job.owner == owner, m.Job.request_id == request_id)).one_or_none()


def _table(model: type[m.Base]) -> Table:
    return m.Base.metadata.tables[model.__tablename__]


def _job_defaults() -> dict[str, Any]:
    """Every jobs column's value when a new row does not set it (the models' scalar defaults)."""
    out: dict[str, Any] = {}
    for column in _table(m.Job).columns:
        default = column.default
        arg = getattr(default, "arg", None) if default is not None else None
        out[column.key] = None if callable(arg) else arg
    return out


_JOB_DEFAULTS = _job_defaults()
# Statements of every submission, built once (building them cost more than running them).
_JOBS = _table(m.Job)
# The longest request id the ledger holds (its column's length: PostgreSQL enforces it).
MAX_REQUEST_ID = int(cast(Any, _JOBS.c.request_id.type).length)
_INSERT_JOB = insert(_JOBS)
_INSERT_EVENT = insert(_table(m.JobEvent))
_KNOWN_REQUESTS = select(_JOBS.c.request_id, _JOBS.c.id).where(
    _JOBS.c.owner == bindparam("owner"), _JOBS.c.request_id.in_(bindparam("request_ids", expanding=True))
)
# A position counted at admission (or for a job the scheduler has not ranked) counts the QUEUED
# jobs ahead of it, at most AHEAD_COUNTED of them: past that the position is unknown (0) until the
# scheduler ranks the job. Counting them all went through the whole queue for every submission
# batch and every job shown: at 1,000,000 queued 0.1 s each, and admission fell from ~680 to ~60
# submissions a second with the database thread counting.
AHEAD_COUNTED = 10_000
_AHEAD = select(func.count()).select_from(
    select(_JOBS.c.seq)  # in the dispatch order index: counted without reading a row (`id` is not)
    .where(
        _JOBS.c.state == sm.QUEUED,
        _JOBS.c.queue == bindparam("queue"),
        (_JOBS.c.priority > bindparam("priority"))
        | ((_JOBS.c.priority == bindparam("priority")) & (_JOBS.c.seq < bindparam("seq"))),
    )
    .limit(bindparam("most"))
    .subquery()
)


def count_ahead(s: Session, queue: str, priority: int, seq: int) -> int | None:
    """The QUEUED jobs of `queue` before (`priority`, `seq`) in FIFO-within-priority order; None
    when there are AHEAD_COUNTED or more (not counted further)."""
    params = {"queue": queue, "priority": priority, "seq": seq, "most": AHEAD_COUNTED}
    return _counted(int(s.connection().execute(_AHEAD, params).scalar() or 0))


def _counted(ahead: int) -> int | None:
    return None if ahead >= AHEAD_COUNTED else ahead


def _chain_rows(item: NewJob, first_seq: int, now: float) -> tuple[list[dict[str, Any]], list[str]]:
    """The jobs rows of one submission (the job, then one per stage waiting on the one before),
    and the reason of each one's first event."""
    head = _job_row(item, item.spec, first_seq, now, request_id=item.request_id)
    chain, reasons = [head], ["admitted"]
    if not item.spec.then_stages:
        return chain, reasons
    stage_spec = job_spec_pb2.JobSpec()
    stage_spec.CopyFrom(item.spec)
    del stage_spec.then_stages[:]
    for stage in item.spec.then_stages:
        parent = chain[-1]
        chain.append(
            _job_row(
                item,
                stage_spec,
                first_seq + len(chain),
                now,
                parent=parent,
                stage=stage,
                wait=(
                    st.WAIT_REASON_DEPENDENCY,
                    f"waiting for {parent['stage'] or 'training'} job {parent['id']} to succeed",
                ),
            )
        )
        reasons.append(f"{stage} stage of {head['id']}")
    return chain, reasons


def _job_row(
    item: NewJob,
    spec: job_spec_pb2.JobSpec,
    seq: int,
    now: float,
    *,
    request_id: str = "",
    parent: Mapping[str, Any] | None = None,
    stage: str = "",
    wait: tuple[int, str] = (st.WAIT_REASON_PRIORITY, "waiting for the scheduler"),
) -> dict[str, Any]:
    row = dict(_JOB_DEFAULTS)
    row.update(item.columns)
    row.update(
        id=ids.new_job_id(),
        owner=item.owner,
        state=sm.QUEUED,
        desired=sm.NO_REQUEST,
        spec=spec.SerializeToString(),
        request_id=request_id,
        parent_job_id=parent["id"] if parent is not None else "",
        stage=stage,
        not_before=NEVER if parent is not None else 0.0,
        wait_reason=wait[0],
        wait_message=wait[1],
        seq=seq,
        created_at=now,
        updated_at=now,
        event_seq=1,  # its QUEUED event
    )
    return row


def _insert_rows(s: Session, rows: Sequence[dict[str, Any]], reasons: Sequence[str], now: float) -> None:
    """The jobs rows and each one's first event (QUEUED): one executemany per table."""
    if not rows:
        return
    conn = s.connection()
    conn.execute(_INSERT_JOB, rows)
    conn.execute(_INSERT_EVENT, _first_events(rows, reasons, now))


def _first_events(rows: Sequence[Mapping[str, Any]], reasons: Sequence[str], now: float) -> list[dict[str, Any]]:
    """Each new job's first event (QUEUED), as job_events rows."""
    return [
        dict(
            job_id=row["id"],
            seq=1,
            attempt_id="",
            from_state=st.JOB_STATE_UNSPECIFIED,
            to_state=sm.QUEUED,
            at=now,
            reason=reason,
            attempt_only=False,
        )
        for row, reason in zip(rows, reasons, strict=True)
    ]


def _queued(s: Session, plans: Sequence[_Plan], positions: Mapping[str, int] | None = None) -> list[Queued]:
    """Each plan's Queued; `positions` of the new jobs when the caller counted them already."""
    if positions is None:
        positions = _positions(s, [row for plan in plans for row in plan.chain])
    out = []
    for plan in plans:
        if plan.chain:
            head = plan.chain[0]
            # the row as inserted, read through attributes like a Job: building an ORM instance per
            # submission (attribute instrumentation) was 5 % of the console's CPU in a storm
            out.append(Queued(cast(m.Job, SimpleNamespace(**head)), created=True, queue_position=positions[head["id"]]))
        else:
            out.append(Queued(get_job(s, plan.existing), created=False))
    return out


_Group = tuple[str, int]  # (queue, priority)


def _positions(s: Session, rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """1-based queue positions of new QUEUED rows, FIFO within priority (the scheduler ranks them
    on its next pass): one count per (queue, priority), 0 (unknown) past AHEAD_COUNTED. The rows'
    seqs are one block that no other transaction can take, so the rows of a group that come
    between two of its members are its own."""
    groups = _groups(rows)
    ahead = {
        (queue, priority): count_ahead(s, queue, priority, int(members[0]["seq"]))
        for (queue, priority), members in groups.items()
    }
    return _numbered(groups, ahead)


def _groups(rows: Sequence[Mapping[str, Any]]) -> dict[_Group, list[Mapping[str, Any]]]:
    """The rows by (queue, priority), each group in seq order."""
    groups: dict[_Group, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["queue"], row["priority"]), []).append(row)
    for members in groups.values():
        members.sort(key=lambda r: int(r["seq"]))
    return groups


def _numbered(groups: Mapping[_Group, list[Mapping[str, Any]]], ahead: Mapping[_Group, int | None]) -> dict[str, int]:
    """Positions from each group's count of jobs ahead of its first member (None: not counted)."""
    out: dict[str, int] = {}
    for key, members in groups.items():
        before = ahead[key]
        for i, row in enumerate(members):
            out[row["id"]] = 0 if before is None else before + i + 1
    return out


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
    """Increment and return a named counter (see `reserve_counter`)."""
    return reserve_counter(s, name, 1)


def reserve_counter(s: Session, name: str, n: int) -> int:
    """Add `n` to a named counter and return the first of the `n` numbers reserved: one atomic
    upsert, row-locked until commit on PostgreSQL, so no other transaction takes a number in the
    block. (A read-then-insert let two concurrent first submissions both insert the row on
    PostgreSQL, and one failed with a unique violation; found by the admission benchmark.)"""
    dialect = s.get_bind().dialect.name
    stmt = _COUNTER_UPSERT.get(dialect)
    if stmt is None:
        stmt = _COUNTER_UPSERT[dialect] = _counter_upsert(pg_insert if dialect == "postgresql" else sqlite_insert)
    return int(s.connection().execute(stmt, {"name": name, "n": n}).scalar_one()) - n + 1


def _counter_upsert(upsert: Any) -> Any:
    table = _table(m.Counter)
    stmt = upsert(table).values(name=bindparam("name"), value=bindparam("n"))
    return stmt.on_conflict_do_update(
        index_elements=[table.c.name], set_={"value": table.c.value + stmt.excluded.value}
    ).returning(table.c.value)


_COUNTER_UPSERT: dict[str, Any] = {}  # per dialect, built once: the statement is the same every call


SET_WAIT_CHUNK = 10_000


def set_wait(s: Session, waiting: dict[str, tuple[int, str, int]]) -> None:
    """Record why QUEUED jobs wait (reason, message, position); only touches jobs still QUEUED
    whose record changes."""
    if not waiting:
        return
    ids = list(waiting)
    current: dict[str, tuple[int, str, int]] = {}
    # In chunks: one statement takes at most 65,535 parameters on PostgreSQL (a big queue has
    # more). By id alone, the state checked here: with `state = QUEUED` in the statement SQLite
    # read the chunk through the state index, every QUEUED job of the ledger for each chunk (at
    # 1,000,000 queued, 2.9 s per chunk of 10,000 instead of 0.04 s by the primary key).
    for i in range(0, len(ids), SET_WAIT_CHUNK):
        current.update(
            (r.id, (r.wait_reason, r.wait_message, r.queue_position))
            for r in s.execute(
                select(m.Job.id, m.Job.state, m.Job.wait_reason, m.Job.wait_message, m.Job.queue_position).where(
                    m.Job.id.in_(ids[i : i + SET_WAIT_CHUNK])
                )
            )
            if r.state == sm.QUEUED
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
