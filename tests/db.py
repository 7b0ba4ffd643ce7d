"""Database fixtures: every ledger test runs on SQLite and on PostgreSQL (one parametrized fixture).

PostgreSQL runs on 127.0.0.1:5432 on our machines (trust auth). Each test session creates its own
database and drops it at the end, so runs never see each other's rows. If PostgreSQL is down the
fixture tries to start it (pg_ctlcluster) and fails loudly if it cannot; it never skips.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest

from control.db import migrate
from control.db.engine import Database

PG_ADMIN = os.environ.get("STARFORGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_up() -> bool:
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def ensure_postgres() -> None:
    """Start the machine's PostgreSQL cluster if it is down; raise if it cannot be reached."""
    if _pg_up():
        return
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if versions:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"],
            capture_output=True,
            check=False,
        )
        for _ in range(50):
            if _pg_up():
                return
            time.sleep(0.2)
    raise RuntimeError(f"PostgreSQL is not reachable at {PG_ADMIN} and could not be started")


def create_pg_database() -> str:
    """A fresh database; returns its SQLAlchemy URL."""
    ensure_postgres()
    name = f"sf_test_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    return f"{base}/{name}"


def drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


def _truncate(db: Database) -> None:
    from sqlalchemy import text

    from control.db.models import Base

    with db.engine.begin() as conn:
        if db.sqlite:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(table.delete())
        else:
            names = ", ".join(t.name for t in Base.metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names}"))


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A migrated, empty ledger database URL on SQLite or PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    url = request.getfixturevalue("pg_url")
    db = Database(url)
    migrate.upgrade(db.engine)
    _truncate(db)
    db.close()
    yield url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A Database on a migrated, empty ledger (SQLite and PostgreSQL)."""
    database = Database(db_url)
    migrate.upgrade(database.engine)
    try:
        yield database
    finally:
        database.close()
