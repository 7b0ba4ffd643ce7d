"""How an attempt ends: the one function that turns "the command exited" into a ledger outcome.

Both the capsule's COMMAND_EXITED event (ingest) and the executor's observation (reconciler) end
attempts through `finish_attempt`, so a job ends the same way whoever noticed first, and only once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from google.protobuf.message import DecodeError
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_pb2, job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control import auth, diagnosis
from control.db import models as m
from control.ledger import jobs, pipeline
from control.ledger import state_machine as sm

RETRY_BACKOFF_SECONDS = (2.0, 10.0, 30.0, 60.0)


def finish_attempt(
    s: Session,
    job: m.Job,
    attempt: m.Attempt,
    *,
    exit_code: int | None,
    signal: int = 0,
    known_class: int = st.FAILURE_CLASS_UNSPECIFIED,
    message: str = "",
    hint: str = "",
    log_tail: Sequence[str] = (),
    evidence: diagnosis.LogEvidence | None = None,
    stopped_by_backend: bool = False,
    now: float | None = None,
) -> list[jobs.Transition]:
    """End `attempt` (no-op if it already ended). Returns the transitions made.

    `evidence` is what diagnosis.read_log found in the log tail, read before this transaction;
    without it the rules read `log_tail` here."""
    if attempt.state not in sm.ACTIVE:
        if attempt.exit_code is None and exit_code is not None:
            attempt.exit_code = exit_code
        return []
    now = time.time() if now is None else now
    if exit_code is not None:
        attempt.exit_code = exit_code
    entrypoint = "train.sh" if job.method == "custom/custom" else "the training command"
    if job.desired == sm.PAUSE:
        target, reason = sm.PAUSED, attempt.reason or "paused: GPUs released, checkpoint kept"
    elif job.desired == sm.STOP or stopped_by_backend:
        target, reason = sm.STOPPED, attempt.reason if job.desired else (message or "stopped")
    elif exit_code == 0 and not signal and known_class == st.FAILURE_CLASS_UNSPECIFIED:
        target, reason = sm.SUCCEEDED, f"{entrypoint} exited with code 0"
    else:
        target = sm.FAILED
        diag = diagnosis.diagnose(
            exit_code=exit_code,
            signal=signal,
            known_class=known_class,
            message=message,
            log_tail=log_tail,
            entrypoint=entrypoint,
            evidence=evidence,
            untracked=untracked_files(job),
            hint=hint,
        )
        attempt.failure_class = diag.failure_class
        reason = diag.summary
        if attempt.state == job.state:
            job.diagnosis = diag.SerializeToString()
    attempt.reason = reason
    out = jobs.advance(s, job, attempt, target, reason, now=now)
    if attempt.state not in sm.ACTIVE:
        auth.expire_run_tokens(s, attempt.id)
    if job.state == sm.FAILED:
        out += maybe_auto_retry(s, job, attempt, now=now)
    if job.state in sm.TERMINAL:
        out += pipeline.on_end(s, job)
    return out


def untracked_files(job: m.Job) -> list[str]:
    """The untracked (not packed) lab files the job's provenance lists."""
    spec = job_spec_pb2.JobSpec()
    try:
        spec.ParseFromString(job.spec or b"")
    except DecodeError:
        return []
    return list(spec.provenance.untracked_files[: diagnosis.MAX_UNTRACKED_CHECKED])


def maybe_auto_retry(s: Session, job: m.Job, attempt: m.Attempt, *, now: float) -> list[jobs.Transition]:
    """Requeue a FAILED job when its failure is retryable and its budget allows."""
    if attempt.failure_class not in diagnosis.RETRYABLE or job.retries_used >= job.retry_budget:
        return []
    job.retries_used += 1
    job.next_cause = job_pb2.ATTEMPT_CAUSE_AUTO_RETRY
    job.not_before = now + RETRY_BACKOFF_SECONDS[min(job.retries_used - 1, len(RETRY_BACKOFF_SECONDS) - 1)]
    t = jobs.transition(
        s,
        job,
        sm.QUEUED,
        f"automatic retry {job.retries_used} of {job.retry_budget} after: {attempt.reason}",
        now=now,
    )
    job.wait_reason = st.WAIT_REASON_RETRY_BACKOFF
    job.wait_message = f"retrying after a retryable failure ({attempt.reason})"
    return [t]


def diagnosis_of(job: m.Job) -> job_pb2.Diagnosis | None:
    if not job.diagnosis:
        return None
    d = job_pb2.Diagnosis()
    d.ParseFromString(job.diagnosis)
    return d
