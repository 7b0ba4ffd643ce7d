"""unique (owner, request_id), attempt-only events

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

- Submissions are idempotent per (owner, request_id): duplicates that concurrent retries created
  before the index existed are folded into the oldest job of each pair first (the later ones keep
  their rows and history but lose the request id), then a partial unique index is added. The plain
  index it supersedes stays until a later release drops it (expand/contract: a replica of the
  previous release may still be serving from this database, docs/deploy.md).
- job_events.attempt_only marks the events of a stale attempt (its job had moved on); it has a
  default, so the previous release's inserts still work.

jobs.desired keeps its released string form ("", "stop", "pause"), which the previous release
reads and writes; the models map it to the contract's DesiredState (control.db.models).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _release_duplicate_request_ids()
    op.create_index(
        "uq_jobs_owner_request",
        "jobs",
        ["owner", "request_id"],
        unique=True,
        sqlite_where=sa.text("request_id != ''"),
        postgresql_where=sa.text("request_id != ''"),
    )
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt_only", sa.Boolean(), nullable=False, server_default=sa.false()))


def _release_duplicate_request_ids() -> None:
    """Keep the request id on the first job (lowest admission seq) of each (owner, request_id)."""
    op.execute(
        sa.text(
            "UPDATE jobs SET request_id = '' WHERE request_id != '' AND EXISTS ("
            " SELECT 1 FROM jobs AS first WHERE first.owner = jobs.owner"
            " AND first.request_id = jobs.request_id"
            " AND (first.seq < jobs.seq OR (first.seq = jobs.seq AND first.id < jobs.id)))"
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_column("attempt_only")
    op.drop_index("uq_jobs_owner_request", table_name="jobs")
