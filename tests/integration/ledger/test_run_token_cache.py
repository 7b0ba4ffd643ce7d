"""A run token is cached by the verifier of the process that issued it, once its row is committed
(control/auth.py, TokenVerifier), on SQLite and PostgreSQL.

The runner's first call then reads nothing from the ledger, and is authorized exactly as a lookup
would authorize it. A token whose transaction rolled back, or whose savepoint did, was never
stored: it is not cached, and it is refused.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from common import errors
from control import auth
from control.db.engine import Database
from tests import factories as f


class _Boom(Exception):
    pass


def _job_and_attempt(db: Database) -> tuple[str, str]:
    def make(s: Session) -> tuple[str, str]:
        f.user(s, "alice", admin=True)  # an admin's run token is still no admin
        job = f.job(s, owner="alice")
        return job.id, f.attempt(s, job).id

    return db.run_sync(make)


@pytest.fixture
def statements(db: Database) -> Iterator[list[str]]:
    """The SQL statements the database is sent while the test runs."""
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


async def test_a_committed_run_token_is_verified_without_a_read(db: Database, statements: list[str]) -> None:
    verifier = auth.TokenVerifier(db)
    job_id, attempt_id = _job_and_attempt(db)
    token = db.run_sync(lambda s: auth.issue_run_token(s, "alice", job_id, attempt_id))
    statements.clear()
    cached = await verifier.verify(token)
    assert statements == []
    assert cached == auth.Principal(
        user="alice", admin=False, kind="run", token_id=cached.token_id, job_id=job_id, attempt_id=attempt_id
    )
    verifier.forget()  # what a lookup finds is the same caller
    assert await verifier.verify(token) == cached
    assert statements  # that one read the ledger


async def test_a_run_token_whose_transaction_rolled_back_is_refused(db: Database) -> None:
    verifier = auth.TokenVerifier(db)
    job_id, attempt_id = _job_and_attempt(db)
    issued: list[str] = []

    def issue_then_fail(s: Session) -> None:
        issued.append(auth.issue_run_token(s, "alice", job_id, attempt_id))
        s.flush()  # the row was written, then the transaction is rolled back
        raise _Boom

    with pytest.raises(_Boom):
        db.run_sync(issue_then_fail)
    with pytest.raises(errors.Unauthenticated, match="the token is not valid"):
        await verifier.verify(issued[0])


async def test_a_run_token_undone_by_its_savepoint_is_refused(db: Database) -> None:
    verifier = auth.TokenVerifier(db)
    job_id, attempt_id = _job_and_attempt(db)
    issued: list[str] = []

    def issue_in_a_savepoint_then_commit(s: Session) -> str:
        with contextlib.suppress(_Boom), s.begin_nested():
            issued.append(auth.issue_run_token(s, "alice", job_id, attempt_id))
            s.flush()
            raise _Boom
        assert issued
        return auth.issue_run_token(s, "alice", job_id, attempt_id)  # this one is committed

    kept = db.run_sync(issue_in_a_savepoint_then_commit)
    with pytest.raises(errors.Unauthenticated, match="the token is not valid"):
        await verifier.verify(issued[0])
    assert (await verifier.verify(kept)).attempt_id == attempt_id


async def test_a_revoked_run_token_is_refused_once_the_cache_lapses(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caching at issue keeps the rule every token has: a change to the row counts within
    CACHE_SECONDS."""
    verifier = auth.TokenVerifier(db)
    job_id, attempt_id = _job_and_attempt(db)
    token = db.run_sync(lambda s: auth.issue_run_token(s, "alice", job_id, attempt_id))
    assert (await verifier.verify(token)).kind == "run"
    db.run_sync(lambda s: auth.expire_run_tokens(s, attempt_id, grace_seconds=-1))
    later = time.monotonic() + auth.CACHE_SECONDS + 1
    # the verifier's clock only (the event loop keeps the real one)
    monkeypatch.setattr(auth, "time", types.SimpleNamespace(time=time.time, monotonic=lambda: later))
    with pytest.raises(errors.Unauthenticated, match="has expired"):
        await verifier.verify(token)


async def test_a_run_token_expired_in_the_transaction_that_issued_it_is_not_cached(db: Database) -> None:
    """The expiry is one UPDATE that the session's row does not see: the cache must not take the
    token as the row says, unexpired."""
    verifier = auth.TokenVerifier(db)
    job_id, attempt_id = _job_and_attempt(db)

    def issue_and_end(s: Session) -> str:
        token = auth.issue_run_token(s, "alice", job_id, attempt_id)
        auth.expire_run_tokens(s, attempt_id, grace_seconds=-1)
        return token

    token = db.run_sync(issue_and_end)
    with pytest.raises(errors.Unauthenticated, match="has expired"):
        await verifier.verify(token)
