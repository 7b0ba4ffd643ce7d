"""Apply what a capsule reports: records stored once per (attempt, seq), lifecycle events to the ledger.

The cursor row of the attempt is locked while a batch is applied, so two streams of the same
attempt (a capsule that reconnected to another replica) never store a record twice.

Every record is bounded on the way in (telemetry.bounds): lines are cut, a job's log stops at its
quota (one marker line, the dropped bytes counted on the job row, locked with the batch), oversized
metrics and samples records are trimmed. The diagnosis of an attempt that ends reads the log tail
before the transaction (`tail_for_diagnosis`, then diagnosis.read_log_in_worker) and is handed in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2
from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import lifecycle_event_pb2 as lc
from starforge_api.job.v1 import telemetry_pb2

from common import errors
from control import diagnosis
from control import metrics as prom
from control.db import models as m
from control.ledger import jobs, outcomes
from control.ledger import state_machine as sm
from control.telemetry import bounds, logs, metrics, packed
from control.telemetry.bounds import IngestLimits

DEFAULT_LIMITS = IngestLimits()


@dataclass
class Applied:
    acked_seq: int
    transitions: list[jobs.Transition] = field(default_factory=list)
    logs_added: int = 0
    metrics_added: int = 0
    signal: int = pb.CONTROL_SIGNAL_UNSPECIFIED
    job_id: str = ""
    kinds: dict[str, int] = field(default_factory=dict)
    # the log lines stored, as (attempt_number, first offset, (stream, time, text) rows): handed to
    # the in-memory tails (telemetry.log_tail) once the transaction has committed
    log_segments: list[tuple[int, int, list[tuple[int, float, str]]]] = field(default_factory=list)


def cursor_for(s: Session, attempt: m.Attempt, *, for_update: bool) -> m.IngestCursor:
    cur = s.get(m.IngestCursor, attempt.id, with_for_update=for_update)
    if cur is None:
        cur = m.IngestCursor(
            attempt_id=attempt.id,
            job_id=attempt.job_id,
            attempt_number=attempt.number,
            acked_seq=0,
            next_log_offset=0,
        )
        s.add(cur)
        s.flush()
        if for_update:
            cur = s.get(m.IngestCursor, attempt.id, with_for_update=True) or cur
    return cur


# What a google.protobuf.Timestamp can hold (0001-01-01 .. 9999-12-31): a time outside it would be
# stored and then fail every read of the job's logs or metrics.
MIN_SECONDS, MAX_SECONDS = -62135596800.0, 253402300799.0


def _seconds(t: timestamp_pb2.Timestamp) -> float:
    """A record's time in epoch seconds; its arrival time when it has none or one out of range."""
    seconds = t.seconds + t.nanos / 1e9
    return seconds if seconds and MIN_SECONDS <= seconds <= MAX_SECONDS else time.time()


def _evidence(s: Session, job: m.Job, attempt: m.Attempt, given: diagnosis.LogEvidence | None) -> diagnosis.LogEvidence:
    """The evidence read before the transaction, or (for callers that have none) read here."""
    if given is not None:
        return given
    return diagnosis.read_log(logs.last_text(s, job.id, attempt.number, diagnosis.MAX_TAIL_LINES))


def _lifecycle(
    s: Session,
    job: m.Job,
    attempt: m.Attempt,
    ev: lc.LifecycleEvent,
    at: float,
    evidence: diagnosis.LogEvidence | None,
) -> list[jobs.Transition]:
    phase = ev.phase
    if phase == lc.LIFECYCLE_PHASE_COMMAND_STARTED:
        if attempt.state in (sm.SUBMITTED, sm.PENDING):
            return jobs.advance(s, job, attempt, sm.RUNNING, ev.message or "training command started", now=at)
        return []
    if phase == lc.LIFECYCLE_PHASE_COMMAND_EXITED:
        code = ev.exit_code if ev.HasField("exit_code") else None
        # USER_CODE is the capsule's default for any non-zero exit; the server's rules read the log
        # and refine it (out of memory, data, image). A more specific class from the capsule stands.
        known = ev.failure_class if ev.failure_class != st.FAILURE_CLASS_USER_CODE else st.FAILURE_CLASS_UNSPECIFIED
        return outcomes.finish_attempt(
            s,
            job,
            attempt,
            exit_code=code,
            signal=ev.signal,
            known_class=known,
            message=ev.message if known else "",
            # a clean exit is not diagnosed (outcomes.finish_attempt): its log tail is not read
            evidence=None if bounds.clean_exit(ev) else _evidence(s, job, attempt, evidence),
            now=at,
        )
    if phase == lc.LIFECYCLE_PHASE_RUNNER_FAILED:
        return outcomes.finish_attempt(
            s,
            job,
            attempt,
            exit_code=ev.exit_code if ev.HasField("exit_code") else None,
            known_class=ev.failure_class or st.FAILURE_CLASS_PRECHECK,
            message=ev.message,
            hint=ev.details.get("hint", ""),
            evidence=_evidence(s, job, attempt, evidence),
            now=at,
        )
    return []


def _metric_rows(
    points: Sequence[telemetry_pb2.MetricPoint], at: float, limits: IngestLimits
) -> tuple[list[tuple[int, str, float, float]], list[telemetry_pb2.MetricPoint], list[str]]:
    """A metrics record's (step, name, value, time) rows, its NaN points (not stored) and the
    lines that say what its bounds dropped (telemetry.bounds), in one pass over the usual record."""
    if len(points) > limits.max_points_per_record:
        return _bounded_metric_rows(points, at, limits)
    rows = []
    nans = []
    for p in points:
        name = p.name
        if len(name) > bounds.MAX_METRIC_NAME_CHARS:
            return _bounded_metric_rows(points, at, limits)
        value = p.value
        if math.isnan(value):
            nans.append(p)
        else:
            rows.append((p.step, name, value, _seconds(p.time) if p.HasField("time") else at))
    return rows, nans, []


def _bounded_metric_rows(
    points: Sequence[telemetry_pb2.MetricPoint], at: float, limits: IngestLimits
) -> tuple[list[tuple[int, str, float, float]], list[telemetry_pb2.MetricPoint], list[str]]:
    kept, notes = bounds.bound_points(points, limits)
    rows, nans, _ = _metric_rows(kept, at, limits)
    return rows, nans, notes


_COLUMN_DOUBLES = frozenset({3, 4})  # MetricColumns.values and .times
_Packed = tuple[str, list[int], bytes, bytes]  # name, steps, values, times (packed little-endian)


def _packed_entry(entry: pb.MetricColumns, budget: int, at: float) -> _Packed | None:
    """The usual entry (a name within bounds, as many values as steps, as many times or none, no
    more points than `budget`) as stored: values and times packed little-endian, taken from its
    serialisation (the record's time for every point when it has no times). None for any other
    entry. Its values and times are not checked here (`_all_numbers`)."""
    name = entry.name
    steps = entry.steps[:]
    n = len(steps)
    if not n or n > budget or len(name) > bounds.MAX_METRIC_NAME_CHARS or len(entry.values) != n:
        return None
    if len(entry.times) not in (0, n):
        return None
    fields = packed.length_delimited(entry.SerializeToString(), _COLUMN_DOUBLES)
    if fields is None:
        return None
    values = fields.get(3, b"")
    times = fields.get(4, b"") or packed.repeat_double(at, n)
    if len(values) != 8 * n or len(times) != 8 * n:
        return None
    return name, steps, values, times


def _all_numbers(entries: Sequence[_Packed]) -> bool:
    """Whether every value of `entries` is a number (no NaN, no infinity) and every time one a
    Timestamp holds after 1970: checked over all the entries at once."""
    values = b"".join(e[2] for e in entries)
    times = b"".join(e[3] for e in entries)
    return packed.all_finite(values) and packed.all_positive_up_to(times, MAX_SECONDS)


def _usual_entries(entries: Sequence[pb.MetricColumns], budget: int, at: float) -> list[_Packed | None]:
    """Per entry, its packed columns when it can be stored as it came (see `_packed_entry`, and
    every value and time checked), else None."""
    out: list[_Packed | None] = []
    for entry in entries:
        whole = _packed_entry(entry, budget, at)
        if whole is not None:
            budget -= len(whole[1])
        out.append(whole)
    usual = [e for e in out if e is not None]
    if usual and not _all_numbers(usual):  # rare: find the entries that need the per-value path
        out = [e if e is not None and _all_numbers([e]) else None for e in out]
    return out


def _add_columns(
    into: metrics.Columns,
    entries: Sequence[pb.MetricColumns],
    at: float,
    budget: int,
    nans: list[tuple[str, int]],
) -> list[str]:
    """Add a record's MetricColumns to `into`, at most `budget` points; NaN values are left out
    (named in `nans`). Returns the lines that say what was cut or dropped."""
    notes = []
    dropped = 0
    limit = budget
    for entry, usual in zip(entries, _usual_entries(entries, budget, at), strict=True):
        if usual is not None:
            into.add_packed(*usual)
            budget -= len(usual[1])
            continue
        name = entry.name
        if len(name) > bounds.MAX_METRIC_NAME_CHARS:
            notes.append(
                f"starforge: metric points dropped: names are at most {bounds.MAX_METRIC_NAME_CHARS} "
                f"characters (one began {name[:40]!r})"
            )
            continue
        steps, values = entry.steps[:], entry.values[:]
        n = len(steps)
        if len(values) != n:
            n = min(n, len(values))
            notes.append(
                f"starforge: metric {name!r}: {len(steps)} steps and {len(values)} values; "
                f"the first {n} points were stored"
            )
            del steps[n:], values[n:]
        if n > budget:
            dropped += n - budget
            n = budget
            del steps[n:], values[n:]
        if not n:
            continue
        budget -= n
        times = entry.times[:]
        if len(times) != len(entry.steps):
            times = [at] * n
        else:
            del times[n:]
            # a time of 0 (none) or out of a Timestamp's range, or NaN, is the record's time
            if not (min(times) > 0.0 and max(times) <= MAX_SECONDS) or math.isnan(sum(times)):
                times = [t if t and MIN_SECONDS <= t <= MAX_SECONDS else at for t in times]
        if math.isnan(sum(values)):  # a NaN (or inf - inf): keep the points that are numbers
            keep = [i for i, v in enumerate(values) if not math.isnan(v)]
            nans += [(name, steps[i]) for i, v in enumerate(values) if math.isnan(v)]
            steps, values, times = [steps[i] for i in keep], [values[i] for i in keep], [times[i] for i in keep]
        into.add(name, steps, values, times)
    if dropped:
        notes.append(
            f"starforge: a metrics record carried more than {limit} values; the first {limit} were "
            f"stored, {dropped} dropped"
        )
    return notes


def _masked_samples(samples: Sequence[telemetry_pb2.Sample], mask: Callable[[str], str]) -> list[telemetry_pb2.Sample]:
    out = []
    for sample in samples:
        copy = telemetry_pb2.Sample()
        copy.CopyFrom(sample)
        copy.prompt, copy.completion = mask(sample.prompt), mask(sample.completion)
        out.append(copy)
    return out


def _masked_event(ev: lc.LifecycleEvent, mask: Callable[[str], str]) -> lc.LifecycleEvent:
    if not ev.message:
        return ev
    copy = lc.LifecycleEvent()
    copy.CopyFrom(ev)
    copy.message = mask(ev.message)
    return copy


# The masker of an attempt's log lines (its job's secret values -> ***), given the attempt's and
# its job's ids; see control.secrets.
Masks = Callable[[Session, str, str], Callable[[str], str]]


def _no_mask(s: Session, attempt_id: str, job_id: str) -> Callable[[str], str]:
    return str


def check_scope(attempt_id: str, scope_attempt_id: str | None) -> None:
    """A run token reports for its own attempt only (None: a trusted caller, no token scope)."""
    if scope_attempt_id is not None and attempt_id != scope_attempt_id:
        raise errors.PermissionDenied(
            f"this run token belongs to another attempt than {attempt_id}",
            reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE,
        )


def check_outcome_open(attempt: m.Attempt, records: Sequence[pb.Record], acked_seq: int) -> None:
    """An ended attempt's outcome is final: its lifecycle records are refused (a token that leaked
    from the attempt must not turn it into a success, or end its job's next attempt). Logs and
    metrics still drain while the run token's grace lasts."""
    if attempt.state in sm.ACTIVE:
        return
    if any(r.seq > acked_seq and r.WhichOneof("body") == "lifecycle" for r in records):
        raise errors.PermissionDenied(
            f"attempt {attempt.id} has ended ({sm.name(attempt.state)}); its outcome can no longer change",
            reason=error_reason_pb2.ERROR_REASON_ATTEMPT_ENDED,
        )


def tail_for_diagnosis(s: Session, attempt_id: str, *, scope_attempt_id: str | None) -> list[str]:
    """The log lines an ending attempt's diagnosis reads (none when the attempt already ended)."""
    check_scope(attempt_id, scope_attempt_id)
    attempt = jobs.get_attempt(s, attempt_id)
    if attempt.state not in sm.ACTIVE:
        return []
    return logs.last_text(s, attempt.job_id, attempt.number, diagnosis.MAX_TAIL_LINES)


class _LogWriter:
    """The job's log lines of one batch: cut, within the job's quota, in order."""

    def __init__(self, log_bytes: int, log_dropped_bytes: int, limits: IngestLimits) -> None:
        self.limits = limits
        self.budget = bounds.LogBudget(
            quota=limits.log_quota_bytes,
            used=log_bytes,
            dropped=log_dropped_bytes,
            marked=bool(log_dropped_bytes),
        )
        self.rows: list[tuple[int, float, str]] = []

    def add(self, stream: int, at: float, line: str) -> None:
        text = bounds.cut_line(line, self.limits.max_line_bytes)
        if self.budget.admit(bounds.line_bytes(text)):
            self.rows.append((stream, at, text))
            return
        marker = self.budget.marker()
        if marker is not None:
            self.rows.append((telemetry_pb2.LOG_STREAM_SYSTEM, at, marker))

    def take(self) -> list[tuple[int, float, str]]:
        rows, self.rows = self.rows, []
        return rows

    def close(self) -> tuple[int, int]:
        """What the job has stored and dropped with this batch (bytes), for its row."""
        if self.budget.dropped_now:
            prom.INGEST_LOG_DROPPED_BYTES.inc(self.budget.dropped_now)
            self.budget.dropped_now = 0
        return self.budget.used, self.budget.dropped


@dataclass
class _Stream:
    """What storing a batch reads and writes of its attempt: the cursor (locked), the job row's log
    counters (locked) and what the signal is decided by."""

    attempt_id: str
    job_id: str
    attempt_number: int
    acked_seq: int
    next_log_offset: int
    log_bytes: int
    log_dropped_bytes: int


# Storing a batch without a lifecycle record reads and writes these columns only: Core statements
# on the session's connection, compiled once, in the ORM path's lock order (cursor, then job row).
_CUR, _ATT, _JOB = m.IngestCursor.__table__, m.Attempt.__table__, m.Job.__table__
assert isinstance(_CUR, Table)
assert isinstance(_JOB, Table)
_READ_CURSOR = (
    select(_CUR.c.acked_seq, _CUR.c.next_log_offset, _CUR.c.job_id, _CUR.c.attempt_number, _ATT.c.state)
    .join_from(_CUR, _ATT, _ATT.c.id == _CUR.c.attempt_id)
    .where(_CUR.c.attempt_id == bindparam("attempt"))
    .with_for_update(of=_CUR)
)
_READ_JOB = (
    select(_JOB.c.desired, _JOB.c.log_bytes, _JOB.c.log_dropped_bytes)
    .where(_JOB.c.id == bindparam("job"))
    .with_for_update()
)
_WRITE_CURSOR = (
    update(_CUR)
    .where(_CUR.c.attempt_id == bindparam("attempt"))
    .values(acked_seq=bindparam("acked"), next_log_offset=bindparam("offset"))
)
_WRITE_JOB_LOG = (
    update(_JOB)
    .where(_JOB.c.id == bindparam("job"))
    .values(log_bytes=bindparam("used"), log_dropped_bytes=bindparam("dropped"))
)


def _signal(desired: int, attempt_state: int) -> int:
    if desired in (sm.STOP, sm.PAUSE) and attempt_state in sm.ACTIVE:
        return pb.CONTROL_SIGNAL_STOP if desired == sm.STOP else pb.CONTROL_SIGNAL_PAUSE
    return pb.CONTROL_SIGNAL_UNSPECIFIED


class Rows:
    """Where `_store` puts a batch's log lines and metric chunks: straight into the session's
    transaction (this class), or gathered for several runs' batches (`ingest_group.Gathered`)."""

    def __init__(self, s: Session) -> None:
        self.s = s

    def logs(self, job_id: str, attempt_number: int, offset: int, rows: Sequence[tuple[int, float, str]]) -> int:
        return logs.append(self.s, job_id, attempt_number, offset, rows)

    def metrics(self, job_id: str, attempt_number: int, points: metrics.Columns) -> None:
        metrics.append(self.s, job_id, attempt_number, points)


def _store(
    s: Session,
    stream: _Stream,
    records: Sequence[pb.Record],
    mask_of: Callable[[], Callable[[str], str]],
    limits: IngestLimits,
    lifecycle: Callable[[lc.LifecycleEvent, int, float], list[jobs.Transition]],
    into: Rows | None = None,
) -> Applied:
    """Store the records after `stream.acked_seq` in order, advancing `stream` (its cursor and log
    counters, which the caller writes back); `lifecycle(event, seq, time)` applies a lifecycle record.
    Log lines and metric chunks go `into` (the session's transaction by default)."""
    rows_to = into or Rows(s)
    out = Applied(acked_seq=stream.acked_seq, job_id=stream.job_id)
    writer = _LogWriter(stream.log_bytes, stream.log_dropped_bytes, limits)
    columns = metrics.Columns()
    masker: list[Callable[[str], str]] = []

    def mask(text: str) -> str:
        if not masker:
            masker.append(mask_of())
        return masker[0](text)

    def flush() -> None:
        log_rows = writer.take()
        if log_rows:  # for the followers' in-memory tail, once committed
            out.log_segments.append((stream.attempt_number, stream.next_log_offset, log_rows))
        stream.next_log_offset = rows_to.logs(stream.job_id, stream.attempt_number, stream.next_log_offset, log_rows)
        points = columns.take()
        rows_to.metrics(stream.job_id, stream.attempt_number, points)
        out.logs_added += len(log_rows)
        out.metrics_added += points.count

    for rec in records:
        if rec.seq <= stream.acked_seq:
            continue
        if rec.seq != stream.acked_seq + 1:
            flush()
            raise errors.InvalidArgument(
                f"records out of order for {stream.attempt_id}: expected seq {stream.acked_seq + 1}, got {rec.seq}"
            )
        at = _seconds(rec.time)
        kind = rec.WhichOneof("body")
        if kind == "log_chunk":
            for line in rec.log_chunk.lines:
                writer.add(rec.log_chunk.stream, at, mask(line))
        elif kind == "metrics":
            for line in _add_metrics(columns, rec.metrics, at, limits):
                writer.add(telemetry_pb2.LOG_STREAM_SYSTEM, at, line)
        elif kind == "samples":
            samples, notes = bounds.bound_samples(_masked_samples(rec.samples.samples, mask), limits)
            for note in notes:
                writer.add(telemetry_pb2.LOG_STREAM_SYSTEM, at, note)
            metrics.append_samples(s, stream.job_id, stream.attempt_number, samples, at)
        elif kind == "lifecycle":
            flush()  # the lines before an exit must be stored before the diagnosis reads them
            out.transitions += lifecycle(_masked_event(rec.lifecycle, mask), rec.seq, at)
        stream.acked_seq = rec.seq
        out.kinds[kind or "empty"] = out.kinds.get(kind or "empty", 0) + 1
    flush()
    stream.log_bytes, stream.log_dropped_bytes = writer.close()
    out.acked_seq = stream.acked_seq
    return out


def _add_metrics(columns: metrics.Columns, batch: pb.MetricBatch, at: float, limits: IngestLimits) -> list[str]:
    """Add a metrics record's points to `columns`; the system lines it calls for (bounds, NaNs)."""
    nans: list[tuple[str, int]] = []
    notes: list[str] = []
    if batch.points:
        rows, nan_points, notes = _metric_rows(batch.points, at, limits)
        columns.add_rows(rows)
        nans += [(p.name, p.step) for p in nan_points]
    if batch.columns:
        left = max(0, limits.max_points_per_record - len(batch.points))
        notes += _add_columns(columns, batch.columns, at, left, nans)
    if nans:  # a diverged loss: not stored (a chart cannot draw it, SQLite cannot hold it)
        where = ", ".join(f"{name} at step {step}" for name, step in nans[:3])
        notes.append(f"starforge: metric value NaN not stored: {where}")
    return notes


def _apply_telemetry(
    s: Session, attempt_id: str, records: Sequence[pb.Record], masks: Masks, limits: IngestLimits
) -> Applied | None:
    """`apply_records` for a batch without lifecycle records, through Core statements: the cursor
    and the job row locked and read, the rows inserted, the cursor and the log counters written.
    None when the attempt has no cursor yet (its first batch takes the ORM path, which makes it)."""
    conn = s.connection()
    row = conn.execute(_READ_CURSOR, {"attempt": attempt_id}).one_or_none()
    if row is None:
        return None
    acked, offset, job_id, number, attempt_state = row
    desired, log_bytes, log_dropped = conn.execute(_READ_JOB, {"job": job_id}).one()
    stream = _Stream(attempt_id, job_id, number, acked, offset, log_bytes or 0, log_dropped or 0)
    before = (stream.acked_seq, stream.next_log_offset, stream.log_bytes, stream.log_dropped_bytes)
    out = _store(s, stream, records, lambda: masks(s, attempt_id, job_id), limits, _no_lifecycle)
    if (stream.acked_seq, stream.next_log_offset) != before[:2]:
        conn.execute(
            _WRITE_CURSOR, {"attempt": attempt_id, "acked": stream.acked_seq, "offset": stream.next_log_offset}
        )
    if (stream.log_bytes, stream.log_dropped_bytes) != before[2:]:
        conn.execute(_WRITE_JOB_LOG, {"job": job_id, "used": stream.log_bytes, "dropped": stream.log_dropped_bytes})
    out.signal = _signal(desired, attempt_state)
    return out


def _no_lifecycle(event: lc.LifecycleEvent, seq: int, at: float) -> list[jobs.Transition]:
    raise AssertionError("a batch with a lifecycle record is stored through the ORM")


def apply_records(
    s: Session,
    attempt_id: str,
    records: Sequence[pb.Record],
    *,
    scope_attempt_id: str | None,
    masks: Masks = _no_mask,
    limits: IngestLimits = DEFAULT_LIMITS,
    evidence: Mapping[int, diagnosis.LogEvidence] | None = None,
) -> Applied:
    """Store `records` of one attempt in order, skipping those already stored. Log lines, samples
    and lifecycle messages are masked with `masks` first: a job's secret values never reach the
    stores (and a line is cut after masking, so a cut never leaves half a secret).

    `evidence` maps the seq of a record that ends the attempt to what its log tail holds, read
    before this transaction (the diagnosis reads it here otherwise).

    A batch of logs, metrics and samples only (the usual one) is stored through Core statements
    (`_apply_telemetry`); one with a lifecycle record, or an attempt's first, through the ORM
    objects the ledger's transitions need. Both lock the cursor, then the job row."""
    check_scope(attempt_id, scope_attempt_id)
    if not any(rec.WhichOneof("body") == "lifecycle" for rec in records):
        done = _apply_telemetry(s, attempt_id, records, masks, limits)
        if done is not None:
            return done
    attempt = jobs.get_attempt(s, attempt_id)
    cur = cursor_for(s, attempt, for_update=True)
    job = jobs.get_job(s, attempt.job_id, for_update=True)
    check_outcome_open(attempt, records, cur.acked_seq)
    stream = _Stream(
        attempt.id, job.id, attempt.number, cur.acked_seq, cur.next_log_offset, job.log_bytes or 0,
        job.log_dropped_bytes or 0,
    )  # fmt: skip

    def lifecycle(event: lc.LifecycleEvent, seq: int, at: float) -> list[jobs.Transition]:
        return _lifecycle(s, job, attempt, event, at, (evidence or {}).get(seq))

    out = _store(s, stream, records, lambda: masks(s, attempt.id, job.id), limits, lifecycle)
    cur.acked_seq, cur.next_log_offset = stream.acked_seq, stream.next_log_offset
    job.log_bytes, job.log_dropped_bytes = stream.log_bytes, stream.log_dropped_bytes
    out.signal = _signal(job.desired, attempt.state)
    return out


def system_lines(
    s: Session, attempt: m.Attempt, lines: Sequence[str], *, max_line_bytes: int = DEFAULT_LIMITS.max_line_bytes
) -> None:
    """Append platform lines (executor log tails, dispatch errors) to an attempt's log.

    An executor's log tail is what the job printed: each line is cut like the capsule's lines.
    They do not count against the job's quota (at most one tail per attempt)."""
    if not lines:
        return
    cur = cursor_for(s, attempt, for_update=True)
    now = time.time()
    cur.next_log_offset = logs.append(
        s,
        attempt.job_id,
        attempt.number,
        cur.next_log_offset,
        [(telemetry_pb2.LOG_STREAM_SYSTEM, now, bounds.cut_line(line, max_line_bytes)) for line in lines],
    )
