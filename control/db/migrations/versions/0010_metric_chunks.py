"""metric points stored in columns

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

Metric points are stored as chunks: one row per (ingest batch, attempt, metric name) holding
packed arrays of steps, values and times, instead of one row per point (a row and an index
entry per point capped ingest near 250,000 points/s on SQLite). Points stored before stay in
metric_points; readers merge both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("attempt_number", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("step_data", sa.LargeBinary(), nullable=False),
        sa.Column("value_data", sa.LargeBinary(), nullable=False),
        sa.Column("time_data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_chunks")),
    )
    with op.batch_alter_table("metric_chunks", schema=None) as batch_op:
        batch_op.create_index("ix_metric_chunks_job_name", ["job_id", "name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("metric_chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_chunks_job_name")
    op.drop_table("metric_chunks")
