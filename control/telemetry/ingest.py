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
from control.telemetry import bounds, logs, metrics
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
            evidence=_evidence(s, job, attempt, evidence),
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
    for entry in entries:
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
            # a time of 0 (none) or out of a Timestamp's range, or NaN, is the record's time (the
            # usual column, all after 1970 and in range, is checked in three passes at C speed)
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


# The masker of an attempt's log lines (its job's secret values -> ***), see control.secrets.
Masks = Callable[[Session, m.Attempt], Callable[[str], str]]


def _no_mask(s: Session, attempt: m.Attempt) -> Callable[[str], str]:
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

    def __init__(self, job: m.Job, limits: IngestLimits) -> None:
        self.job = job
        self.limits = limits
        self.budget = bounds.LogBudget(
            quota=limits.log_quota_bytes,
            used=job.log_bytes or 0,
            dropped=job.log_dropped_bytes or 0,
            marked=bool(job.log_dropped_bytes),
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

    def close(self) -> None:
        """Count what this batch stored and dropped on the job row (locked with the batch)."""
        self.job.log_bytes = self.budget.used
        self.job.log_dropped_bytes = self.budget.dropped
        if self.budget.dropped_now:
            prom.INGEST_LOG_DROPPED_BYTES.inc(self.budget.dropped_now)
            self.budget.dropped_now = 0


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
    before this transaction (the diagnosis reads it here otherwise)."""
    check_scope(attempt_id, scope_attempt_id)
    attempt = jobs.get_attempt(s, attempt_id)
    mask = masks(s, attempt)
    cur = cursor_for(s, attempt, for_update=True)
    job = jobs.get_job(s, attempt.job_id, for_update=True)
    check_outcome_open(attempt, records, cur.acked_seq)
    out = Applied(acked_seq=cur.acked_seq, job_id=job.id)
    writer = _LogWriter(job, limits)
    columns = metrics.Columns()

    def flush() -> None:
        log_rows = writer.take()
        if log_rows:
            out.log_segments.append((attempt.number, cur.next_log_offset, log_rows))
        cur.next_log_offset = logs.append(s, job.id, attempt.number, cur.next_log_offset, log_rows)
        points = columns.take()
        metrics.append(s, job.id, attempt.number, points)
        out.logs_added += len(log_rows)
        out.metrics_added += points.count

    for rec in records:
        if rec.seq <= cur.acked_seq:
            continue
        if rec.seq != cur.acked_seq + 1:
            flush()
            raise errors.InvalidArgument(
                f"records out of order for {attempt_id}: expected seq {cur.acked_seq + 1}, got {rec.seq}"
            )
        at = _seconds(rec.time)
        kind = rec.WhichOneof("body")
        if kind == "log_chunk":
            for line in rec.log_chunk.lines:
                writer.add(rec.log_chunk.stream, at, mask(line))
        elif kind == "metrics":
            batch = rec.metrics
            nans: list[tuple[str, int]] = []
            notes: list[str] = []
            if batch.points:
                rows, nan_points, notes = _metric_rows(batch.points, at, limits)
                columns.add_rows(rows)
                nans += [(p.name, p.step) for p in nan_points]
            if batch.columns:
                left = max(0, limits.max_points_per_record - len(batch.points))
                notes += _add_columns(columns, batch.columns, at, left, nans)
            for note in notes:
                writer.add(telemetry_pb2.LOG_STREAM_SYSTEM, at, note)
            if nans:  # a diverged loss: not stored (a chart cannot draw it, SQLite cannot hold it)
                where = ", ".join(f"{name} at step {step}" for name, step in nans[:3])
                line = f"starforge: metric value NaN not stored: {where}"
                writer.add(telemetry_pb2.LOG_STREAM_SYSTEM, at, line)
        elif kind == "samples":
            samples, notes = bounds.bound_samples(_masked_samples(rec.samples.samples, mask), limits)
            for note in notes:
                writer.add(telemetry_pb2.LOG_STREAM_SYSTEM, at, note)
            metrics.append_samples(s, job.id, attempt.number, samples, at)
        elif kind == "lifecycle":
            flush()  # the lines before an exit must be stored before the diagnosis reads them
            given = (evidence or {}).get(rec.seq)
            out.transitions += _lifecycle(s, job, attempt, _masked_event(rec.lifecycle, mask), at, given)
        cur.acked_seq = rec.seq
        out.kinds[kind or "empty"] = out.kinds.get(kind or "empty", 0) + 1
    flush()
    writer.close()
    out.acked_seq = cur.acked_seq
    if job.desired in (sm.STOP, sm.PAUSE) and attempt.state in sm.ACTIVE:
        out.signal = pb.CONTROL_SIGNAL_STOP if job.desired == sm.STOP else pb.CONTROL_SIGNAL_PAUSE
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
