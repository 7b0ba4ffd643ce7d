"""secrets

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Jobs keep their secret references in the stored JobSpec (JobSpec.secrets), so the jobs table
needs no column for them; values live only here, sealed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=16), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("scope", "holder", "name", name=op.f("pk_secrets")),
    )
    op.create_index(op.f("ix_secrets_owner"), "secrets", ["owner"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_secrets_owner"), table_name="secrets")
    op.drop_table("secrets")
