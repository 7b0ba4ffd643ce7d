"""Alembic environment: uses the connection handed over by control.db.migrate when there is one."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from control.db.models import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is None:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as c:
            context.configure(connection=c, target_metadata=target_metadata, render_as_batch=True)
            context.run_migrations()
        return
    context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
    context.run_migrations()


run()
