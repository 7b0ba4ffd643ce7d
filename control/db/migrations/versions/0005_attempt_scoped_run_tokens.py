"""attempt-scoped run tokens

A run token names one attempt (not only its job): a token captured by attempt 1's training code
must not report for attempt 2.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("attempt_id", sa.String(40), nullable=True))
        batch.create_index("ix_tokens_attempt_id", ["attempt_id"])
    # Run tokens issued before this revision are named "run <attempt id>": scope them to it, so
    # an attempt running across the upgrade keeps reporting and no token stays job-wide.
    op.execute(
        "UPDATE tokens SET attempt_id = substr(name, 5) WHERE kind = 'run' AND name LIKE 'run %' AND attempt_id IS NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_index("ix_tokens_attempt_id")
        batch.drop_column("attempt_id")
