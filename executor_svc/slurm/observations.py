"""What the slurm executor reports for an attempt (pure functions, no I/O).

Two sources, in this order:
1. slurmctld's record of the job while it still has one: its state list mapped by `states.py`,
   refined with what only the executor knows (bootstrap's exit codes 97/98, the batch
   script's 96 for a Ray cluster that did not come up, image failures in the log);
2. once slurmctld forgot the job (MinJobAge after it ended, no accounting), the batch script's
   outcome marker in the staging dir, plus whether StarForge asked for the stop.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.base import Observation
from executor_svc.slurm.models import SlurmJob
from executor_svc.slurm.script import RAY_FAILED_EXIT
from executor_svc.slurm.staging import AttemptRecord, Outcome
from executor_svc.slurm.states import job_ledger_state

PRECHECK_EXIT = 97  # bootstrap.sh: capsule integrity check failed
NO_PYTHON_EXIT = 98  # bootstrap.sh: no usable Python in the image
_EXIT_CLASS: dict[int, tuple[int, str]] = {
    PRECHECK_EXIT: (st.FAILURE_CLASS_PRECHECK, "a check before the training command failed"),
    NO_PYTHON_EXIT: (st.FAILURE_CLASS_IMAGE, "the image has no usable Python for the capsule"),
    RAY_FAILED_EXIT: (st.FAILURE_CLASS_INFRA, "the Ray cluster of the job did not come up"),
}
_ENDED = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)


def image_failure(tail: Sequence[str]) -> bool:
    """True when the log shows the container runtime failing to get or start the image."""
    for line in tail:
        low = line.lower()
        if low.startswith("pyxis:") and ("fail" in low or "error" in low):
            return True
        if "fatal:" in low and ("image" in low or "container" in low or ".sif" in low):
            return True
    return False


def _classify(code: int | None, tail: Sequence[str]) -> tuple[int, str]:
    """(failure class, explanation) of a failed run from its exit code and log."""
    if code in _EXIT_CLASS:
        return _EXIT_CLASS[code]
    if image_failure(tail):
        return st.FAILURE_CLASS_IMAGE, "the container runtime could not start the image"
    return st.FAILURE_CLASS_USER_CODE, ""


def exit_code_of(job: SlurmJob) -> int | None:
    """The batch script's exit status, 128 + N when signal N ended it (as shells report it)."""
    if job.exit_signal:
        return 128 + job.exit_signal
    return job.exit_code


def nodes_of(job: SlurmJob) -> str:
    parts = job.components or (job,)
    return "+".join(p.nodes for p in parts if p.nodes)


def from_slurm(attempt_id: str, job: SlurmJob, tail: Sequence[str], *, stop_requested: bool = False) -> Observation:
    """An attempt whose job slurmctld still knows.

    After a stop StarForge asked for, however the job ended (cancelled; or the capsule exited on
    the SIGTERM sent to its step, 143 or its own code) it is STOPPED.
    """
    mapped = job_ledger_state(job)
    state, failure, message = mapped.state, mapped.failure_class, mapped.message
    code = exit_code_of(job) if state in _ENDED else None
    if state in _ENDED and stop_requested:
        state, failure, message = st.JOB_STATE_STOPPED, st.FAILURE_CLASS_UNSPECIFIED, f"{message}; stopped by StarForge"
    elif state == st.JOB_STATE_FAILED and failure == st.FAILURE_CLASS_USER_CODE:
        failure, why = _classify(code, tail)
        if why:
            message = f"{message}; {why}"
    ended = state in _ENDED
    return Observation(
        attempt_id=attempt_id,
        state=state,
        exit_code=code,
        message=message,
        log_tail=tuple(tail),
        backend_handle=str(job.job_id),
        node=nodes_of(job),
        start_time=job.start_time,
        end_time=(job.end_time or dt.datetime.now(dt.UTC)) if ended else None,
        failure_class=failure,
    )


def from_marker(
    record: AttemptRecord,
    outcome: Outcome | None,
    started: dt.datetime | None,
    tail: Sequence[str],
    node: str = "",
) -> Observation:
    """An attempt whose job slurmctld no longer knows: the outcome marker decides."""
    gone = f"Slurm job {record.slurm_job_id} is no longer known to slurmctld"
    stop_time = dt.datetime.fromtimestamp(record.stop_requested_at, dt.UTC) if record.stop_requested_at else None
    code = outcome.exit_code if outcome else None
    failure: int = st.FAILURE_CLASS_UNSPECIFIED
    if record.stop_requested_at is not None:
        state, message = st.JOB_STATE_STOPPED, f"{gone}; stopped (cancelled by StarForge)"
    elif outcome is None:
        state, failure = st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA
        message = f"{gone} and its batch script left no outcome (killed, or its node failed)"
    elif outcome.signal in ("TERM", "INT"):
        state = st.JOB_STATE_STOPPED
        message = f"{gone}; its batch script ended on SIG{outcome.signal} (cancelled, or its time limit)"
    elif outcome.exit_code == 0:
        state, message = st.JOB_STATE_SUCCEEDED, f"{gone}; its batch script ended with exit code 0"
    else:
        state = st.JOB_STATE_FAILED
        failure, why = _classify(outcome.exit_code, tail)
        message = f"{gone}; its batch script ended with exit code {code}" + (f"; {why}" if why else "")
    return Observation(
        attempt_id=record.attempt_id,
        state=state,
        exit_code=code,
        message=message,
        log_tail=tuple(tail),
        backend_handle=str(record.slurm_job_id),
        node=node,
        start_time=started,
        end_time=(outcome.ended_at if outcome else None) or stop_time,
        failure_class=failure,
    )
