"""job log bytes: what a job's log stored and dropped, for the per-job log quota

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("log_bytes", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("log_dropped_bytes", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("log_dropped_bytes")
        batch.drop_column("log_bytes")
