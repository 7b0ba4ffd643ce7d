"""indexes for two reads that went through every QUEUED or STOPPED job

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

When a job ends, `pipeline.on_end` looks for the stages waiting on it (`parent_job_id`, QUEUED,
waiting on a dependency); without an index on `parent_job_id` that read went through every QUEUED
job, 2.5-3 s of the database thread per finished job at 1,000,000 queued. Every reconcile pass
(every 2 s) looks for the jobs the platform stopped (`stopped_by`, PAUSED or STOPPED); through the
state index that read went through every STOPPED job ever, a user's stops included. Both indexes
are partial: only stages have a parent, and only platform stops a `stopped_by`, so they cost
nothing for the other jobs. Expand-only: two new indexes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    stages = sa.text("parent_job_id != ''")
    op.create_index(
        "ix_jobs_stages_waiting",
        "jobs",
        ["parent_job_id", "state", "wait_reason"],
        sqlite_where=stages,
        postgresql_where=stages,
    )
    stopped = sa.text("stopped_by != ''")
    op.create_index(
        "ix_jobs_platform_stopped", "jobs", ["stopped_by", "state"], sqlite_where=stopped, postgresql_where=stopped
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_platform_stopped", table_name="jobs")
    op.drop_index("ix_jobs_stages_waiting", table_name="jobs")
