"""The job as it was after one of its ledger events, rebuilt from the job now and its events.

WatchJob replays a job's past transitions; each carries the job after it, not the job now. The
ledger keeps transitions, not snapshots, so the past job is the current one with what changed
since taken back: its state (and times) at that event, only the attempts that existed then, each
in its state then, and nothing that only a later moment knew (wait reason, diagnosis, ends).
"""

from __future__ import annotations

from collections.abc import Sequence

from starforge_api.job.v1 import job_pb2, job_state_pb2

from control.ledger import state_machine as sm


def job_after(current: job_pb2.Job, events: Sequence[job_pb2.JobEvent], index: int) -> job_pb2.Job:
    """The job after `events[index]`; `events` are all of the job's events so far, in order, and
    `current` is the job after the last of them."""
    if index == len(events) - 1:
        return current
    event = events[index]
    job = job_pb2.Job()
    job.CopyFrom(current)
    job.state = _job_state(events, index)
    job.update_time.CopyFrom(event.time)
    job.ClearField("wait")
    if job.state not in sm.TERMINAL:
        job.ClearField("end_time")
        job.ClearField("diagnosis")
    if job.HasField("start_time") and _after(job.start_time, event.time):
        job.ClearField("start_time")
    attempt_states = _attempt_states(events, index)
    kept = [a for a in job.attempts if a.attempt_id in attempt_states]
    job.ClearField("attempts")
    for a in kept:
        past = job.attempts.add()
        past.CopyFrom(a)
        past.state = attempt_states[a.attempt_id]
        ended_later = past.HasField("end_time") and _after(past.end_time, event.time)
        if past.state in sm.ACTIVE or ended_later:
            for name in ("end_time", "exit_code", "failure_class", "reason"):
                past.ClearField(name)
        if past.HasField("start_time") and _after(past.start_time, event.time):
            past.ClearField("start_time")
    job.retries_used = min(job.retries_used, max(0, len(kept) - 1))
    return job


def _job_state(events: Sequence[job_pb2.JobEvent], index: int) -> job_state_pb2.JobState:
    for e in reversed(events[: index + 1]):
        if not e.attempt_only:
            return e.to_state
    return events[0].from_state


def _attempt_states(events: Sequence[job_pb2.JobEvent], index: int) -> dict[str, job_state_pb2.JobState]:
    states: dict[str, job_state_pb2.JobState] = {}
    for e in events[: index + 1]:
        if e.attempt_id:
            states[e.attempt_id] = e.to_state
    return states


def _after(a: object, b: object) -> bool:
    return (a.seconds, a.nanos) > (b.seconds, b.nanos)  # type: ignore[attr-defined]
