"""Apply what a capsule reports: records stored once per (attempt, seq), lifecycle events to the ledger.

The cursor row of the attempt is locked while a batch is applied, so two streams of the same
attempt (a capsule that reconnected to another replica) never store a record twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session
from starforge.control.v1 import error_reason_pb2
from starforge.ingest.v1 import ingest_service_pb2 as pb
from starforge.job.v1 import job_state_pb2 as st
from starforge.job.v1 import lifecycle_event_pb2 as lc
from starforge.job.v1 import telemetry_pb2

from common import errors
from control.db import models as m
from control.ledger import jobs, outcomes
from control.ledger import state_machine as sm
from control.telemetry import logs, metrics


@dataclass
class Applied:
    acked_seq: int
    transitions: list[jobs.Transition] = field(default_factory=list)
    logs_added: int = 0
    metrics_added: int = 0
    signal: int = pb.CONTROL_SIGNAL_UNSPECIFIED
    job_id: str = ""
    kinds: dict[str, int] = field(default_factory=dict)


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


def _seconds(t: object) -> float:
    """A record's time in epoch seconds; its arrival time when it has none or one out of range."""
    seconds = getattr(t, "seconds", 0) + getattr(t, "nanos", 0) / 1e9
    return seconds if seconds and MIN_SECONDS <= seconds <= MAX_SECONDS else time.time()


def _lifecycle(s: Session, job: m.Job, attempt: m.Attempt, ev: lc.LifecycleEvent, at: float) -> list[jobs.Transition]:
    phase = ev.phase
    if phase == lc.LIFECYCLE_PHASE_COMMAND_STARTED:
        if attempt.state in (sm.SUBMITTED, sm.PENDING):
            return jobs.advance(s, job, attempt, sm.RUNNING, ev.message or "training command started", now=at)
        return []
    if phase == lc.LIFECYCLE_PHASE_COMMAND_EXITED:
        code = ev.exit_code if ev.HasField("exit_code") else None
        tail = logs.last_text(s, job.id, attempt.number)
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
            log_tail=tail,
            now=at,
        )
    if phase == lc.LIFECYCLE_PHASE_RUNNER_FAILED:
        tail = logs.last_text(s, job.id, attempt.number)
        return outcomes.finish_attempt(
            s,
            job,
            attempt,
            exit_code=ev.exit_code if ev.HasField("exit_code") else None,
            known_class=ev.failure_class or st.FAILURE_CLASS_PRECHECK,
            message=ev.message,
            log_tail=tail,
            now=at,
        )
    return []


def apply_records(s: Session, attempt_id: str, records: Sequence[pb.Record], *, scope_job_id: str | None) -> Applied:
    """Store `records` of one attempt in order, skipping those already stored."""
    attempt = jobs.get_attempt(s, attempt_id)
    if scope_job_id is not None and attempt.job_id != scope_job_id:
        raise errors.PermissionDenied(
            "this run token belongs to another run", reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE
        )
    cur = cursor_for(s, attempt, for_update=True)
    job = jobs.get_job(s, attempt.job_id, for_update=True)
    out = Applied(acked_seq=cur.acked_seq, job_id=job.id)
    log_rows: list[tuple[int, float, str]] = []
    metric_rows: list[tuple[int, str, float, float]] = []

    def flush() -> None:
        nonlocal log_rows, metric_rows
        cur.next_log_offset = logs.append(s, job.id, attempt.number, cur.next_log_offset, log_rows)
        metrics.append(s, job.id, attempt.number, metric_rows)
        out.logs_added += len(log_rows)
        out.metrics_added += len(metric_rows)
        log_rows, metric_rows = [], []

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
            log_rows.extend((rec.log_chunk.stream, at, line) for line in rec.log_chunk.lines)
        elif kind == "metrics":
            points = rec.metrics.points
            metric_rows.extend(
                (p.step, p.name, p.value, _seconds(p.time) if p.HasField("time") else at)
                for p in points
                if not math.isnan(p.value)
            )
            nans = [p for p in points if math.isnan(p.value)]
            if nans:  # a diverged loss: SQLite cannot store NaN (it would refuse the whole batch)
                where = ", ".join(f"{p.name} at step {p.step}" for p in nans[:3])
                line = f"starforge: metric value NaN not stored: {where}"
                log_rows.append((telemetry_pb2.LOG_STREAM_SYSTEM, at, line))
        elif kind == "samples":
            metrics.append_samples(s, job.id, attempt.number, list(rec.samples.samples), at)
        elif kind == "lifecycle":
            flush()  # the lines before an exit must be stored before the diagnosis reads them
            out.transitions += _lifecycle(s, job, attempt, rec.lifecycle, at)
        cur.acked_seq = rec.seq
        out.kinds[kind or "empty"] = out.kinds.get(kind or "empty", 0) + 1
    flush()
    out.acked_seq = cur.acked_seq
    if job.desired in (sm.STOP, sm.PAUSE) and attempt.state in sm.ACTIVE:
        out.signal = pb.CONTROL_SIGNAL_STOP if job.desired == sm.STOP else pb.CONTROL_SIGNAL_PAUSE
    return out


def system_lines(s: Session, attempt: m.Attempt, lines: Sequence[str]) -> None:
    """Append platform lines (executor log tails, dispatch errors) to an attempt's log."""
    if not lines:
        return
    cur = cursor_for(s, attempt, for_update=True)
    now = time.time()
    cur.next_log_offset = logs.append(
        s,
        attempt.job_id,
        attempt.number,
        cur.next_log_offset,
        [(telemetry_pb2.LOG_STREAM_SYSTEM, now, line) for line in lines],
    )
