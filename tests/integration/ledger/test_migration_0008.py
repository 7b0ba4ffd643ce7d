"""Migration 0008 on a ledger written by an older version (SQLite and PostgreSQL): duplicate
(owner, request_id) pairs are released before the unique index is made; `desired` keeps its
released string form, which the models read as DesiredState values (the previous release may still
serve from the same database during a rolling upgrade)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.orm import Session

from control.db import migrate
from control.db import models as m
from control.db.engine import make_engine
from control.ledger import state_machine as sm
from tests.db import create_pg_database, drop_pg_database


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


def _row(columns: list[sa.Column[Any]], **values: object) -> dict[str, object]:
    """A jobs row of the old schema: every NOT NULL column gets a neutral value."""
    row: dict[str, object] = {}
    for c in columns:
        if c.nullable:
            continue
        kind = c.type
        if isinstance(kind, sa.Integer):
            row[c.name] = 0
        elif isinstance(kind, sa.Float):
            row[c.name] = 0.0
        elif isinstance(kind, sa.LargeBinary):
            row[c.name] = b""
        else:
            row[c.name] = ""
    row.update(values)
    return row


def test_0008_releases_duplicates_and_keeps_desired_readable(fresh_url: str) -> None:
    engine = make_engine(fresh_url)
    cfg = migrate.alembic_config(fresh_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
    jobs = sa.Table("jobs", sa.MetaData(), autoload_with=engine)
    rows = [
        _row(list(jobs.columns), id="j1", owner="alice", request_id="r", seq=1, desired="stop"),
        _row(list(jobs.columns), id="j2", owner="alice", request_id="r", seq=2, desired="pause"),
        _row(list(jobs.columns), id="j3", owner="bob", request_id="r", seq=3, desired=""),
        _row(list(jobs.columns), id="j4", owner="alice", request_id="", seq=4),
        _row(list(jobs.columns), id="j5", owner="alice", request_id="", seq=5),
    ]
    with engine.begin() as conn:
        conn.execute(jobs.insert(), rows)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        got = dict(
            (r.id, (r.request_id, r.desired))
            for r in conn.execute(sa.text("SELECT id, request_id, desired FROM jobs ORDER BY id"))
        )
    assert got == {
        "j1": ("r", "stop"),  # the first of the duplicates keeps the request id
        "j2": ("", "pause"),
        "j3": ("r", ""),  # another owner's request id is another key
        "j4": ("", ""),
        "j5": ("", ""),
    }
    with Session(engine) as s:  # what the code sees: DesiredState values
        desired = dict(s.execute(sa.select(m.Job.id, m.Job.desired)).all())
    assert desired == {"j1": sm.STOP, "j2": sm.PAUSE, "j3": sm.NO_REQUEST, "j4": sm.NO_REQUEST, "j5": sm.NO_REQUEST}
    jobs = sa.Table("jobs", sa.MetaData(), autoload_with=engine)  # the new schema
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(jobs.insert(), [_row(list(jobs.columns), id="j6", owner="alice", request_id="r", seq=6)])
    engine.dispose()
