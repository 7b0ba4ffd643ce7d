"""index for the scheduler's recent-usage read

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

Every scheduler cycle sums each user's recent usage for fair share from the attempts still going
(`ended_at IS NULL`) or ended within 8 half-lives; without an index on `ended_at` that read scanned
every attempt ever made. Expand-only: one new index.
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_attempts_ended_at", "attempts", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_ended_at", table_name="attempts")
