"""Stops the platform makes on its own: time windows closing and fleet drains.

- A fleet's window closes: its running jobs are stopped (STOPPED, checkpoint kept) and queued
  again from their checkpoint when a window of a fleet that can run them opens.
- A fleet is drained: its running jobs are paused (PAUSED: GPUs released, checkpoint kept) and
  queued again at once; they wait (reason DRAIN) unless another fleet can take them.
"""

from __future__ import annotations

import json
import time

from sqlalchemy import Select, literal_column, select
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m
from control.ledger import jobs
from control.ledger import state_machine as sm

WINDOW = "window"
DRAIN = "drain"


def request_stops(
    s: Session, closed: dict[str, tuple[int, str]], nodes: dict[str, tuple[int, str]] | None = None
) -> list[tuple[str, str]]:
    """Ask active attempts on closed fleets (window: stop; drain: pause), and on draining nodes
    (`nodes`: attempt id -> (DRAIN, message)), to end; returns (attempt, fleet) to stop."""
    out: list[tuple[str, str]] = []
    nodes = nodes or {}
    if not closed and not nodes:
        return out
    rows = s.scalars(
        select(m.Attempt).where(
            m.Attempt.state.in_(sm.ACTIVE), m.Attempt.fleet.in_(list(closed)) | m.Attempt.id.in_(list(nodes))
        )
    )
    for attempt in rows:
        reason, message = closed.get(attempt.fleet) or nodes[attempt.id]
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        if job.desired or attempt.number != job.attempts_count:
            continue
        drain = reason == st.WAIT_REASON_DRAIN
        jobs.request(s, job, sm.PAUSE if drain else sm.STOP)
        job.stopped_by = DRAIN if drain else WINDOW
        attempt.reason = ("paused: " if drain else "stopped: ") + message
        out.append((attempt.id, attempt.fleet))
    return out


def _stopped_by(by: str, state: int) -> Select[m.Job]:
    """The jobs the platform stopped (`by`) that rest in `state`, through the partial index
    `ix_jobs_platform_stopped`: every reconcile pass asks, and the state index alone would read
    every STOPPED job ever (a user's stops included). Its condition is written out as a literal,
    as both databases need to see it to use the index."""
    return select(m.Job).where(m.Job.stopped_by != literal_column("''"), m.Job.stopped_by == by, m.Job.state == state)


def requeue(s: Session, closed: dict[str, tuple[int, str]], now: float | None = None) -> list[str]:
    """Queue again the jobs the platform stopped, once a fleet that can run them takes work."""
    now = time.time() if now is None else now
    out = []
    rows = [*s.scalars(_stopped_by(DRAIN, sm.PAUSED)), *s.scalars(_stopped_by(WINDOW, sm.STOPPED))]
    for job in rows:
        if job.stopped_by == WINDOW:
            fleets = json.loads(job.eligible_fleets or "[]")
            if fleets and all(f in closed for f in fleets):
                continue
        job.next_cause = job_pb2.ATTEMPT_CAUSE_RESUME
        jobs.transition(s, job, sm.QUEUED, f"queued again after the platform {job.stopped_by} stop", now=now)
        out.append(job.id)
    return out
