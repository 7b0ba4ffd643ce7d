"""job image source, framework version and admission warnings

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

What admission decided about a job's image and runtime is recorded with it, so that
`sf job status` and the console say where the image came from (ImageSource), which framework
version runs, and the warnings the submission got (e.g. an image pinned by tag on a production
fleet). Jobs admitted before keep empty values (IMAGE_SOURCE_UNSPECIFIED).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("image_source", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("image_source_detail", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("framework_version", sa.String(length=64), nullable=False, server_default=""))
        batch.add_column(sa.Column("warnings", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("warnings")
        batch.drop_column("framework_version")
        batch.drop_column("image_source_detail")
        batch.drop_column("image_source")
