"""unique (owner, request_id), desired as DesiredState, attempt-only events

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

- Submissions are idempotent per (owner, request_id): duplicates that concurrent retries created
  before the index existed are folded into the oldest job of each pair first (the later ones keep
  their rows and history but lose the request id), then a partial unique index replaces the plain
  one.
- jobs.desired was a string ("", "stop", "pause"); it is the contract's DesiredState now
  (0, DESIRED_STATE_STOP = 1, DESIRED_STATE_PAUSE = 2).
- job_events.attempt_only marks the events of a stale attempt (its job had moved on).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# DesiredState values (starforge.job.v1.DesiredState), fixed here: a migration must not change
# when the contract grows.
DESIRED = {"stop": 1, "pause": 2}


def upgrade() -> None:
    _release_duplicate_request_ids()
    op.drop_index("ix_jobs_owner_request", table_name="jobs")
    op.create_index(
        "uq_jobs_owner_request",
        "jobs",
        ["owner", "request_id"],
        unique=True,
        sqlite_where=sa.text("request_id != ''"),
        postgresql_where=sa.text("request_id != ''"),
    )
    _desired_to_int()
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


def _desired_to_int() -> None:
    cases = " ".join(f"WHEN '{name}' THEN '{value}'" for name, value in DESIRED.items())
    op.execute(sa.text(f"UPDATE jobs SET desired = CASE desired {cases} ELSE '0' END"))  # noqa: S608
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "desired",
            existing_type=sa.String(length=16),
            type_=sa.Integer(),
            existing_nullable=False,
            postgresql_using="desired::integer",
        )


def downgrade() -> None:
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_column("attempt_only")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column(
            "desired",
            existing_type=sa.Integer(),
            type_=sa.String(length=16),
            existing_nullable=False,
            postgresql_using="desired::text",
        )
    names = " ".join(f"WHEN '{value}' THEN '{name}'" for name, value in DESIRED.items())
    op.execute(sa.text(f"UPDATE jobs SET desired = CASE desired {names} ELSE '' END"))  # noqa: S608
    op.drop_index("uq_jobs_owner_request", table_name="jobs")
    op.create_index("ix_jobs_owner_request", "jobs", ["owner", "request_id"])
