"""node/executor token bindings and blob ownership

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "token_bindings",
        sa.Column("token_id", sa.String(length=40), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("fleet", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("token_id", name=op.f("pk_token_bindings")),
    )
    op.create_index(op.f("ix_token_bindings_node"), "token_bindings", ["node"])
    op.create_table(
        "blob_owners",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("digest", "user", name=op.f("pk_blob_owners")),
    )


def downgrade() -> None:
    op.drop_table("blob_owners")
    op.drop_index(op.f("ix_token_bindings_node"), table_name="token_bindings")
    op.drop_table("token_bindings")
