"""Many runs' telemetry batches stored in one transaction, with a handful of set-based statements.

With thousands of log followers the event loop holds the GIL most of the time, and every database
call of the DB thread gives it up and waits up to the switch interval to take it back: a one-line
Report batch stored alone (about eight calls) fell behind at 100 reporting runs. `store` takes the
batches waiting (`control.db.group_commit.GroupCommit` gathers them, bounded in count and bytes)
and stores them together: every cursor read and locked in one statement, every job row in one,
the log lines of all the runs in one multi-row INSERT, the cursors and the log counters written
in one UPDATE each, one COMMIT.

The same rules as a batch stored alone (`ingest.apply_records`): records after the cursor in
order, each exactly once (the cursor rows are locked, in one order: cursors by attempt id, then
job rows by id, as the one-batch path locks a cursor before its job row). A batch is checked
before anything is stored (its token's scope, its records' order), so a bad one is answered with
its own error and the others are stored; any other failure fails the transaction, and the group
commit then stores each batch alone. A batch this path does not take (a lifecycle record, the
attempt's first batch, a second batch of the same attempt in the group) is answered None: the
caller stores it alone, after the group has committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from common import errors
from control.db import models as m
from control.db.engine import insert_rows, insert_rows_at_once, update_rows
from control.telemetry import ingest, metrics
from control.telemetry.bounds import IngestLimits


@dataclass(frozen=True)
class Batch:
    """One Report batch of telemetry (no lifecycle record) and the attempt its token is scoped to."""

    attempt_id: str
    records: Sequence[pb.Record]
    scope_attempt_id: str | None


Result = ingest.Applied | errors.StarforgeError | None

_CUR, _ATT, _JOB = ingest._CUR, ingest._ATT, ingest._JOB
_READ_CURSORS = (
    select(
        _CUR.c.attempt_id, _CUR.c.acked_seq, _CUR.c.next_log_offset, _CUR.c.job_id, _CUR.c.attempt_number, _ATT.c.state
    )
    .join_from(_CUR, _ATT, _ATT.c.id == _CUR.c.attempt_id)
    .where(_CUR.c.attempt_id.in_(bindparam("ids", expanding=True)))
    .order_by(_CUR.c.attempt_id)
    .with_for_update(of=_CUR)
)
_READ_JOBS = (
    select(_JOB.c.id, _JOB.c.desired, _JOB.c.log_bytes, _JOB.c.log_dropped_bytes)
    .where(_JOB.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(_JOB.c.id)
    .with_for_update()
)
_LOG_COLUMNS = ("job_id", "attempt_number", "offset", "stream", "at", "text")


class Gathered(ingest.Rows):
    """The log lines and metric chunks of all the group's batches, inserted at the end."""

    def __init__(self, s: Session) -> None:
        super().__init__(s)
        self.log_rows: list[tuple[Any, ...]] = []
        self.chunk_rows: list[tuple[Any, ...]] = []

    def logs(self, job_id: str, attempt_number: int, offset: int, rows: Sequence[tuple[int, float, str]]) -> int:
        self.log_rows += [(job_id, attempt_number, offset + i, st, at, text) for i, (st, at, text) in enumerate(rows)]
        return offset + len(rows)

    def metrics(self, job_id: str, attempt_number: int, points: metrics.Columns) -> None:
        self.chunk_rows += metrics.chunk_rows(job_id, attempt_number, points)

    def write(self) -> None:
        insert_rows_at_once(self.s, m.LogLine.__tablename__, _LOG_COLUMNS, self.log_rows)
        # a metrics batch is a few large rows per run: one executemany steps once per chunk row
        insert_rows(self.s, m.MetricChunk.__tablename__, metrics.CHUNK_COLUMNS, self.chunk_rows)


def check_order(attempt_id: str, records: Sequence[pb.Record], acked_seq: int) -> None:
    """The records after `acked_seq` must follow it one by one (the error `_store` would raise)."""
    expected = acked_seq + 1
    for rec in records:
        if rec.seq < expected:
            continue
        if rec.seq != expected:
            raise errors.InvalidArgument(
                f"records out of order for {attempt_id}: expected seq {expected}, got {rec.seq}"
            )
        expected += 1


def store(s: Session, batches: Sequence[Batch], masks: ingest.Masks, limits: IngestLimits) -> list[Result]:
    """Store `batches` in the session's transaction; per batch its `Applied`, its own error (nothing
    of it stored), or None (store it alone). See the module docstring."""
    conn = s.connection()
    cursors = {r.attempt_id: r for r in conn.execute(_READ_CURSORS, {"ids": sorted({b.attempt_id for b in batches})})}
    job_ids = sorted({r.job_id for r in cursors.values()})
    job_rows = {r.id: r for r in conn.execute(_READ_JOBS, {"ids": job_ids})} if job_ids else {}
    # the log counters per job, as the group's batches advance them (two attempts of one job share them)
    counters = {j: (r.log_bytes or 0, r.log_dropped_bytes or 0) for j, r in job_rows.items()}
    into = Gathered(s)
    out: list[Result] = []
    taken: dict[str, ingest._Stream] = {}
    for batch in batches:
        cur = cursors.get(batch.attempt_id)
        if cur is None or batch.attempt_id in taken:
            out.append(None)
            continue
        try:
            ingest.check_scope(batch.attempt_id, batch.scope_attempt_id)
            check_order(batch.attempt_id, batch.records, cur.acked_seq)
        except errors.StarforgeError as exc:
            out.append(exc)
            continue
        stream = ingest._Stream(batch.attempt_id, cur.job_id, cur.attempt_number, cur.acked_seq, cur.next_log_offset,
                                *counters[cur.job_id])  # fmt: skip
        out.append(_store_one(s, stream, batch, cur, job_rows[cur.job_id], masks, limits, into))
        counters[cur.job_id] = (stream.log_bytes, stream.log_dropped_bytes)
        taken[batch.attempt_id] = stream
    into.write()
    _write_back(s, cursors, taken, job_rows, counters)
    return out


def _store_one(
    s: Session,
    stream: ingest._Stream,
    batch: Batch,
    cur: Any,
    job: Any,
    masks: ingest.Masks,
    limits: IngestLimits,
    into: Gathered,
) -> ingest.Applied:
    applied = ingest._store(
        s, stream, batch.records, lambda: masks(s, stream.attempt_id, stream.job_id), limits, ingest._no_lifecycle, into
    )
    applied.signal = ingest._signal(job.desired, cur.state)
    return applied


def _write_back(
    s: Session,
    cursors: dict[str, Any],
    taken: dict[str, ingest._Stream],
    job_rows: dict[str, Any],
    counters: dict[str, tuple[int, int]],
) -> None:
    """The cursors and the jobs' log counters that moved, one UPDATE each."""
    moved = [
        (a, st.acked_seq, st.next_log_offset)
        for a, st in taken.items()
        if (st.acked_seq, st.next_log_offset) != (cursors[a].acked_seq, cursors[a].next_log_offset)
    ]
    update_rows(s, m.IngestCursor.__tablename__, "attempt_id", ("acked_seq", "next_log_offset"), moved)
    grew = [
        (j, used, dropped)
        for j, (used, dropped) in counters.items()
        if (used, dropped) != (job_rows[j].log_bytes or 0, job_rows[j].log_dropped_bytes or 0)
    ]
    update_rows(s, m.Job.__tablename__, "id", ("log_bytes", "log_dropped_bytes"), grew)
