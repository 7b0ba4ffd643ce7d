"""Pipelines: `sf submit exp --then export --then eval` queues the stages as jobs of their own.

Each stage is a job linked to the one before it (parent_job_id) and waits with reason DEPENDENCY
until that one SUCCEEDS; it then runs with the pipeline's FORGE_OUT_DIR (the training job's), so
an export stage reads the trained checkpoint. When a job of the chain ends FAILED (for good, no
retry left) or STOPPED, the stages after it are STOPPED, each saying why.
"""

from __future__ import annotations

from sqlalchemy import literal_column, select
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import changes
from control.db import models as m
from control.ledger import jobs
from control.ledger import state_machine as sm

NEVER = jobs.NEVER  # not_before of a stage whose parent has not succeeded


def _children(s: Session, job_id: str) -> list[m.Job]:
    """The stages waiting on `job_id`, through `ix_jobs_stages_waiting`: its partial condition is
    written out as a literal, as both databases need to see it to use the index."""
    return list(
        s.scalars(
            select(m.Job)
            .where(
                m.Job.parent_job_id != literal_column("''"),
                m.Job.parent_job_id == job_id,
                m.Job.state == sm.QUEUED,
                m.Job.wait_reason == st.WAIT_REASON_DEPENDENCY,
            )
            .with_for_update()
        )
    )


def on_end(s: Session, job: m.Job) -> list[jobs.Transition]:
    """Release or skip the stage waiting on `job`, now that `job` rests in a final state."""
    out: list[jobs.Transition] = []
    if job.state == sm.SUCCEEDED:
        for child in _children(s, job.id):
            child.not_before = 0.0
            changes.note(s, child.id)  # runnable now: the scheduler's heads of line re-read it
            child.wait_reason = st.WAIT_REASON_PRIORITY
            child.wait_message = f"{job.stage or 'training'} job {job.id} succeeded; waiting for the scheduler"
    elif job.state in (sm.FAILED, sm.STOPPED):
        for child in _children(s, job.id):
            out.append(
                jobs.transition(
                    s,
                    child,
                    sm.STOPPED,
                    f"not run: the {job.stage or 'training'} job {job.id} ended {sm.name(job.state)}",
                )
            )
            out += on_end(s, child)
    return out
