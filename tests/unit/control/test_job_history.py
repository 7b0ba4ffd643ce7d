"""job_after: the job after a past event, rebuilt from the job now and its event history."""

from __future__ import annotations

from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.job_history import job_after


def event(
    seq: int, frm: st.JobState, to: st.JobState, attempt: str = "", attempt_only: bool = False
) -> job_pb2.JobEvent:
    e = job_pb2.JobEvent(
        job_id="j1", attempt_id=attempt, from_state=frm, to_state=to, sequence=seq, attempt_only=attempt_only
    )
    e.time.seconds = 100 + seq
    return e


HISTORY = [
    event(1, st.JOB_STATE_UNSPECIFIED, st.JOB_STATE_QUEUED),
    event(2, st.JOB_STATE_QUEUED, st.JOB_STATE_SUBMITTED, "j1.1"),
    event(3, st.JOB_STATE_SUBMITTED, st.JOB_STATE_RUNNING, "j1.1"),
    event(4, st.JOB_STATE_RUNNING, st.JOB_STATE_PAUSED, "j1.1"),
    event(5, st.JOB_STATE_PAUSED, st.JOB_STATE_QUEUED),
    event(6, st.JOB_STATE_QUEUED, st.JOB_STATE_SUBMITTED, "j1.2"),
    event(7, st.JOB_STATE_RUNNING, st.JOB_STATE_FAILED, "j1.1", attempt_only=True),
    event(8, st.JOB_STATE_SUBMITTED, st.JOB_STATE_RUNNING, "j1.2"),
]


def current() -> job_pb2.Job:
    job = job_pb2.Job(job_id="j1", state=st.JOB_STATE_RUNNING, retries_used=0)
    job.wait.message = "now"
    a1 = job.attempts.add(attempt_id="j1.1", number=1, state=st.JOB_STATE_FAILED, exit_code=1, reason="late")
    a1.start_time.seconds, a1.end_time.seconds = 103, 107
    a2 = job.attempts.add(attempt_id="j1.2", number=2, state=st.JOB_STATE_RUNNING)
    a2.start_time.seconds = 108
    job.start_time.seconds = 103
    return job


def test_the_last_event_carries_the_job_now() -> None:
    assert job_after(current(), HISTORY, len(HISTORY) - 1) == current()


def test_each_past_event_carries_the_job_then() -> None:
    states = [job_after(current(), HISTORY, i).state for i in range(len(HISTORY))]
    assert states == [
        st.JOB_STATE_QUEUED,
        st.JOB_STATE_SUBMITTED,
        st.JOB_STATE_RUNNING,
        st.JOB_STATE_PAUSED,
        st.JOB_STATE_QUEUED,
        st.JOB_STATE_SUBMITTED,
        st.JOB_STATE_SUBMITTED,  # attempt_only: the old attempt ended, the job did not move
        st.JOB_STATE_RUNNING,
    ]
    first = job_after(current(), HISTORY, 0)
    assert list(first.attempts) == [] and not first.HasField("start_time") and not first.HasField("wait")
    assert first.update_time.seconds == 101

    paused = job_after(current(), HISTORY, 3)
    (a1,) = paused.attempts
    assert (a1.attempt_id, a1.state, a1.HasField("end_time"), a1.HasField("exit_code"), a1.reason) == (
        "j1.1",
        st.JOB_STATE_PAUSED,
        False,
        False,
        "",
    )

    late = job_after(current(), HISTORY, 6)
    assert [(a.attempt_id, a.state) for a in late.attempts] == [
        ("j1.1", st.JOB_STATE_FAILED),
        ("j1.2", st.JOB_STATE_SUBMITTED),
    ]
    assert late.attempts[0].exit_code == 1 and not late.attempts[1].HasField("start_time")
