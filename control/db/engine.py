"""Engine creation and the thread pool every database call runs in.

The control plane is asyncio (grpc.aio); the database is used through SQLAlchemy's sync API in a
small thread pool (`Database.run`). That keeps one code path for SQLite and PostgreSQL, and lets
SQLite have a single writer thread, which is what it does best.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pathlib
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine for `url` with the settings StarForge needs (WAL for SQLite, pre-ping for PG)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8, pool_recycle=300)


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


class Database:
    """An engine, a session factory and the worker threads that use them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite: one writer serialises anyway; more threads only add lock contention.
        workers = 1 if is_sqlite(self.engine) else 8
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="db")

    @property
    def sqlite(self) -> bool:
        return is_sqlite(self.engine)

    async def run(self, fn: Callable[[Session], T]) -> T:
        """Run `fn(session)` in a worker thread inside one transaction (committed if it returns)."""

        def call() -> T:
            with self.sessions.begin() as session:
                return fn(session)

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def run_sync(self, fn: Callable[[Session], T]) -> T:
        """The same as `run`, for start-up code and tests outside the event loop."""
        with self.sessions.begin() as session:
            return fn(session)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.engine.dispose()
