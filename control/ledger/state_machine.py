"""The job lifecycle of DESIGN §3, enforced here and nowhere else.

    QUEUED -> SUBMITTED (dequeued) -> PENDING (launch returned) -> RUNNING (container up)
    RUNNING -> SUCCEEDED | FAILED | STOPPED | PAUSED
    PAUSED -> QUEUED (resume)   FAILED -> QUEUED (retry)   STOPPED -> QUEUED (resume)

Additions, each needed for "nothing lost": a job can be stopped or can fail before it runs
(QUEUED/SUBMITTED/PENDING -> STOPPED | FAILED), and a pending job can be paused (a drain that
catches it before it started). A job that finished before anyone saw it running goes through
RUNNING on its way (see `path_to`), so every job that ran has a RUNNING event.
"""

from __future__ import annotations

from starforge.control.v1 import error_reason_pb2
from starforge.job.v1 import job_state_pb2 as st

from common import errors

QUEUED = st.JOB_STATE_QUEUED
SUBMITTED = st.JOB_STATE_SUBMITTED
PENDING = st.JOB_STATE_PENDING
RUNNING = st.JOB_STATE_RUNNING
SUCCEEDED = st.JOB_STATE_SUCCEEDED
FAILED = st.JOB_STATE_FAILED
STOPPED = st.JOB_STATE_STOPPED
PAUSED = st.JOB_STATE_PAUSED

LEGAL: dict[int, frozenset[int]] = {
    QUEUED: frozenset({SUBMITTED, STOPPED, FAILED}),
    SUBMITTED: frozenset({PENDING, STOPPED, FAILED}),
    PENDING: frozenset({RUNNING, STOPPED, FAILED, PAUSED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, STOPPED, PAUSED}),
    PAUSED: frozenset({QUEUED}),
    FAILED: frozenset({QUEUED}),
    STOPPED: frozenset({QUEUED}),
    SUCCEEDED: frozenset(),
}

TERMINAL = frozenset({SUCCEEDED, FAILED, STOPPED})
# States in which an attempt holds (or may hold) resources on a backend.
ACTIVE = frozenset({SUBMITTED, PENDING, RUNNING})
# States a job rests in without an active attempt.
RESTING = frozenset({QUEUED, SUCCEEDED, FAILED, STOPPED, PAUSED})


def name(state: int) -> str:
    """'RUNNING' for JOB_STATE_RUNNING."""
    try:
        return st.JobState.Name(state).removeprefix("JOB_STATE_")
    except ValueError:
        return f"STATE_{state}"


def check(from_state: int, to_state: int, what: str = "job") -> None:
    """Raise FailedPrecondition (reason ILLEGAL_TRANSITION) unless the transition is legal."""
    if to_state not in LEGAL.get(from_state, frozenset()):
        raise errors.FailedPrecondition(
            f"{what} is {name(from_state)} and cannot become {name(to_state)}",
            reason=error_reason_pb2.ERROR_REASON_ILLEGAL_TRANSITION,
            precondition_violations=(
                errors.PreconditionViolation("STATE", what, f"{name(from_state)} -> {name(to_state)}"),
            ),
        )


def path_to(from_state: int, target: int) -> list[int]:
    """The states to go through from `from_state` to reach `target` along the forward path.

    Used when an observation skips steps (a job seen SUCCEEDED while we thought it PENDING goes
    PENDING -> RUNNING -> SUCCEEDED). Returns [] if already there; raises if unreachable.
    """
    if from_state == target:
        return []
    forward: list[int] = [SUBMITTED, PENDING, RUNNING]
    if target in TERMINAL | {PAUSED} and from_state in forward:
        if target in LEGAL[from_state]:
            # prefer going through RUNNING for outcomes that imply the job ran
            if target in (SUCCEEDED,) and from_state != RUNNING:
                return [*forward[forward.index(from_state) + 1 :], target]
            return [target]
        return [*forward[forward.index(from_state) + 1 :], target]
    if from_state in forward and target in forward and forward.index(target) > forward.index(from_state):
        return forward[forward.index(from_state) + 1 : forward.index(target) + 1]
    check(from_state, target)
    return [target]
