"""The log store: lines per job and attempt, ordered by (attempt_number, offset)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, and_, or_, select, tuple_
from sqlalchemy.orm import Session
from starforge_api.job.v1 import telemetry_pb2

from control.db import models as m
from control.db.engine import insert_rows
from control.ledger.convert import ts

Cursor = tuple[int, int]  # (attempt_number, offset) of the last line seen

# What a read of lines returns: rows of these columns (named as the model's attributes), not ORM
# objects: thousands of followers read lines, and building an entity per line in the session's
# identity map cost more than the query (the rows are read-only anyway).
LINE_COLUMNS = (m.LogLine.attempt_number, m.LogLine.offset, m.LogLine.stream, m.LogLine.at, m.LogLine.text)
Line = Row[int, int, int, float, str]


def append(
    s: Session, job_id: str, attempt_number: int, start_offset: int, lines: Sequence[tuple[int, float, str]]
) -> int:
    """Insert (stream, time, text) lines from `start_offset`; returns the next offset."""
    if not lines:
        return start_offset
    rows = [(job_id, attempt_number, start_offset + i, stream, at, text) for i, (stream, at, text) in enumerate(lines)]
    insert_rows(s, m.LogLine.__tablename__, ("job_id", "attempt_number", "offset", "stream", "at", "text"), rows)
    return start_offset + len(rows)


def _where(job_id: str, attempt_number: int) -> list[object]:
    cond: list[object] = [m.LogLine.job_id == job_id]
    if attempt_number:
        cond.append(m.LogLine.attempt_number == attempt_number)
    return cond


def tail(s: Session, job_id: str, n: int, attempt_number: int = 0) -> list[Line]:
    """The last `n` lines (all attempts unless one is given), in order."""
    rows = s.execute(
        select(*LINE_COLUMNS)
        .where(*_where(job_id, attempt_number))  # type: ignore[arg-type]
        .order_by(m.LogLine.attempt_number.desc(), m.LogLine.offset.desc())
        .limit(n)
    ).all()
    return list(reversed(rows))


def _beyond(s: Session, cursor: Cursor, later: bool) -> object:
    """The lines after (`later`) or before `cursor` in (attempt_number, offset) order."""
    a, o = cursor
    if s.bind is not None and s.bind.dialect.name == "postgresql":
        key, at = tuple_(m.LogLine.attempt_number, m.LogLine.offset), tuple_(a, o)
        return key > at if later else key < at
    if later:
        return or_(m.LogLine.attempt_number > a, and_(m.LogLine.attempt_number == a, m.LogLine.offset > o))
    return or_(m.LogLine.attempt_number < a, and_(m.LogLine.attempt_number == a, m.LogLine.offset < o))


def after(s: Session, job_id: str, cursor: Cursor | None, limit: int = 2000, attempt_number: int = 0) -> list[Line]:
    """Lines after `cursor` (from the start when None), in order, at most `limit`."""
    stmt = select(*LINE_COLUMNS).where(*_where(job_id, attempt_number))  # type: ignore[arg-type]
    if cursor is not None:
        stmt = stmt.where(_beyond(s, cursor, later=True))  # type: ignore[arg-type]
    return list(s.execute(stmt.order_by(m.LogLine.attempt_number, m.LogLine.offset).limit(limit)))


def before(s: Session, job_id: str, cursor: Cursor, n: int, attempt_number: int = 0) -> list[Line]:
    """The last `n` lines before `cursor`, in order (a page further back than a tail)."""
    rows = s.execute(
        select(*LINE_COLUMNS)
        .where(*_where(job_id, attempt_number), _beyond(s, cursor, later=False))  # type: ignore[arg-type]
        .order_by(m.LogLine.attempt_number.desc(), m.LogLine.offset.desc())
        .limit(n)
    ).all()
    return list(reversed(rows))


def last_text(s: Session, job_id: str, attempt_number: int, n: int = 200) -> list[str]:
    return [r.text for r in tail(s, job_id, n, attempt_number)]


def to_proto(r: Line | m.LogLine) -> telemetry_pb2.LogLine:
    line = telemetry_pb2.LogLine(
        attempt_number=r.attempt_number,
        offset=r.offset,
        stream=r.stream,  # type: ignore[arg-type]
        text=r.text,
    )
    t = ts(r.at)
    if t is not None:
        line.time.CopyFrom(t)
    return line
