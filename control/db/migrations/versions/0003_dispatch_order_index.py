"""dispatch order index

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_state_queue_priority_seq", "jobs", ["state", "queue", "priority", "seq"])
    op.create_index("ix_jobs_state_owner_order", "jobs", ["state", "owner", sa.text("priority DESC"), "seq"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state_owner_order", table_name="jobs")
    op.drop_index("ix_jobs_state_queue_priority_seq", table_name="jobs")
