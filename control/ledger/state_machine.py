"""The job lifecycle, enforced here and nowhere else.

    QUEUED -> SUBMITTED (dequeued) -> PENDING (launch returned) -> RUNNING (container up)
    RUNNING -> SUCCEEDED | FAILED | STOPPED | PAUSED
    PAUSED -> QUEUED (resume)   FAILED -> QUEUED (retry)   STOPPED -> QUEUED (resume)

Additions, each needed for "nothing lost": a job can be stopped or can fail before it runs
(QUEUED/SUBMITTED/PENDING -> STOPPED | FAILED), and a job can be paused before it started
(SUBMITTED/PENDING -> PAUSED: a drain or a user's pause that catches it while its launch is in
flight or its container is not up yet; without SUBMITTED -> PAUSED such a job had to be given a
RUNNING event and a start time it never had). A paused job can be stopped (PAUSED -> STOPPED: the
user gives up on resuming it; a drain's pause would otherwise be queued again by the platform;
`sf job stop` of a paused job failed with an illegal transition before this edge).

When an observation skips steps, `path_to` walks the shortest legal path through the states an
attempt passes while it holds resources (so a job seen SUCCEEDED while we thought it PENDING goes
PENDING -> RUNNING -> SUCCEEDED), and never through a state the job did not pass.

What a user or the platform asked of a running job (`job.desired`, the contract's DesiredState) is
a second, small machine checked here too: nothing -> STOP | PAUSE, PAUSE -> STOP.
"""

from __future__ import annotations

from starforge_api.control.v1 import error_reason_pb2
from starforge_api.job.v1 import job_state_pb2 as st

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
    SUBMITTED: frozenset({PENDING, STOPPED, FAILED, PAUSED}),
    PENDING: frozenset({RUNNING, STOPPED, FAILED, PAUSED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, STOPPED, PAUSED}),
    PAUSED: frozenset({QUEUED, STOPPED}),
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
    """The states after `from_state` on the shortest legal path to `target` ([] if already there).

    Only ACTIVE states may be passed on the way: an observation can imply that an attempt started
    or ran, never that it ended and was queued again. Raises FailedPrecondition if there is no
    such path (the same error `check` gives).
    """
    if from_state == target:
        return []
    if from_state not in ACTIVE:  # only an attempt's progress is implied; a resting job moves by one edge
        check(from_state, target)
        return [target]
    previous: dict[int, int] = {from_state: from_state}
    frontier = [from_state]
    while frontier and target not in previous:
        nxt: list[int] = []
        for state in frontier:
            if state not in ACTIVE:
                continue  # a resting state ends a path; it is never passed through
            for after in sorted(LEGAL.get(state, frozenset())):
                if after not in previous:
                    previous[after] = state
                    nxt.append(after)
        frontier = nxt
    if target not in previous:
        check(from_state, target)  # raises: unreachable
    path = [target]
    while previous[path[-1]] != from_state:
        path.append(previous[path[-1]])
    return path[::-1]


# -- what was asked of a job (DesiredState) -------------------------------------------------------

NO_REQUEST = st.DESIRED_STATE_UNSPECIFIED
STOP = st.DESIRED_STATE_STOP
PAUSE = st.DESIRED_STATE_PAUSE

DESIRED_LEGAL: dict[int, frozenset[int]] = {
    NO_REQUEST: frozenset({STOP, PAUSE}),
    # a stop overrides a pause (the user wants the GPUs back and no resume from the drain)
    PAUSE: frozenset({STOP}),
    STOP: frozenset(),
}
# The state a request ends in.
DESIRED_TARGET: dict[int, int] = {STOP: STOPPED, PAUSE: PAUSED}


def desired_name(desired: int) -> str:
    """'STOP' for DESIRED_STATE_STOP ('none' for no request)."""
    if desired == NO_REQUEST:
        return "none"
    try:
        return st.DesiredState.Name(desired).removeprefix("DESIRED_STATE_")
    except ValueError:
        return f"DESIRED_{desired}"


def check_request(current: int, wanted: int, what: str = "job") -> None:
    """Raise FailedPrecondition unless `wanted` may replace the request `current`."""
    if wanted not in DESIRED_LEGAL.get(current, frozenset()):
        raise errors.FailedPrecondition(
            f"{what} is being asked to {desired_name(current).lower()} and cannot be asked to"
            f" {desired_name(wanted).lower()} instead",
            reason=error_reason_pb2.ERROR_REASON_ILLEGAL_TRANSITION,
            precondition_violations=(
                errors.PreconditionViolation(
                    "DESIRED_STATE", what, f"{desired_name(current)} -> {desired_name(wanted)}"
                ),
            ),
        )
