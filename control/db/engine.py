"""Engine creation and the thread pool every database call runs in.

The control plane is asyncio (grpc.aio); the database is used through SQLAlchemy's sync API in a
small thread pool (`Database.run`). That keeps one code path for SQLite and PostgreSQL, and lets
SQLite have a single writer thread, which is what it does best.

The pool has two queues: calls made for followers (`background=True`: log and watch streams,
thousands of them at once) wait behind every other call, so ingest writes, submissions and the
scheduler never queue behind them (bench `followers`: with 10,000 follow streams connecting, one
FIFO queue kept every run's Report batches behind the followers' reads).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import pathlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from common import errors
from control.db.changes import ChangeFeed

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


class _Call:
    __slots__ = ("args", "fn", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class PriorityPool:
    """Worker threads serving two FIFO queues: a worker takes a background call only when no other
    call waits. A call cancelled before a worker took it is skipped. `shutdown` lets the workers
    finish every call already queued (also at interpreter exit), then joins them."""

    def __init__(self, workers: int, name: str) -> None:
        self._cv = threading.Condition()
        self._queues: tuple[collections.deque[_Call], collections.deque[_Call]] = (
            collections.deque(),
            collections.deque(),
        )
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()
        atexit.register(self.shutdown)

    def submit(self, fn: Callable[..., T], *args: Any, background: bool = False) -> concurrent.futures.Future[T]:
        call = _Call(fn, args)
        with self._cv:
            if self._closed:
                raise RuntimeError("the database is closed")
            self._queues[1 if background else 0].append(call)
            self._cv.notify()
        return call.future

    def waiting(self) -> tuple[int, int]:
        """(normal, background) calls queued and not yet taken by a worker."""
        with self._cv:
            return len(self._queues[0]), len(self._queues[1])

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._queues[0] and not self._queues[1] and not self._closed:
                    self._cv.wait()
                if self._queues[0]:
                    call = self._queues[0].popleft()
                elif self._queues[1]:
                    call = self._queues[1].popleft()
                else:
                    return  # closed and drained
            if not call.future.set_running_or_notify_cancel():
                continue
            try:
                result = call.fn(*call.args)
            except BaseException as exc:  # handed to the caller, as concurrent.futures does
                call.future.set_exception(exc)
            else:
                call.future.set_result(result)
            del call

    def shutdown(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        atexit.unregister(self.shutdown)


class Database:
    """An engine, a session factory and the worker threads that use them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        # QUEUED jobs changed by committed transactions of this process (the scheduler's heads).
        self.queue_changes = ChangeFeed()
        self.queue_changes.attach(self.sessions)
        # SQLite: one writer serialises anyway; more threads only add lock contention.
        workers = 1 if is_sqlite(self.engine) else 8
        self.workers = workers  # transactions that can run at once
        self._pool = PriorityPool(workers, "db")

    @property
    def sqlite(self) -> bool:
        return is_sqlite(self.engine)

    async def run(self, fn: Callable[[Session], T], *, background: bool = False) -> T:
        """Run `fn(session)` in a worker thread inside one transaction (committed if it returns).

        `background`: a read made for a follower (a log or watch stream), which waits until no
        other call is queued: thousands of followers must never delay the writes they follow.

        Raises `errors.Unavailable` when PostgreSQL cannot be reached (down, restarting, the
        connection dropped): callers see UNAVAILABLE and retry; the pool reconnects by itself.
        """
        return await asyncio.wrap_future(self.submit(fn, background=background))

    def submit(self, fn: Callable[[Session], T], *, background: bool = False) -> concurrent.futures.Future[T]:
        """`run` without the await: the worker thread's future, for a caller that settles its own
        waiters from a done-callback (`control.db.group_commit`), one event-loop turn sooner than
        an awaiting task. Raises RuntimeError once the database is closed."""
        return self._pool.submit(self.run_sync, fn, background=background)

    def run_sync(self, fn: Callable[[Session], T]) -> T:
        """The same as `run`, for start-up code and tests outside the event loop."""
        try:
            with self.sessions.begin() as session:
                return fn(session)
        except OperationalError as e:
            if isinstance(e.orig, psycopg.OperationalError):
                first = str(e.orig).strip().splitlines()[0] if str(e.orig).strip() else type(e.orig).__name__
                raise errors.Unavailable(f"the ledger database is unavailable ({first}); retry in a moment") from e
            raise

    def close(self) -> None:
        self._pool.shutdown()
        self.engine.dispose()


def insert_rows(
    s: Session,
    table: str,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    conflict: Sequence[str] = (),
) -> None:
    """INSERT many rows of plain tuples with one DBAPI executemany (SQLite and psycopg alike).

    For the telemetry tables, where a batch is thousands of rows: the ORM's and Core's per-row
    parameter processing cost more than SQLite's insert itself (profile of the ingest benchmark).
    Runs on the session's connection, inside its transaction. `conflict`: the columns of a unique
    key; a row that would repeat one is skipped (`ON CONFLICT (...) DO NOTHING`, both databases).
    """
    if not rows:
        return
    dialect = s.get_bind().dialect
    quote = dialect.identifier_preparer.quote
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    names = ", ".join(quote(c) for c in columns)
    # table and column names are the callers' constants (quoted), never user input
    sql = f"INSERT INTO {quote(table)} ({names}) VALUES ({', '.join([mark] * len(columns))})"  # noqa: S608
    if conflict:
        sql += f" ON CONFLICT ({', '.join(quote(c) for c in conflict)}) DO NOTHING"
    s.connection().exec_driver_sql(sql, list(rows))


class Piped(NamedTuple):
    """One statement sent in a pipeline: its SQL in the driver's own paramstyle, and its
    parameters (a mapping; a list of mappings for an executemany).

    `replan`: PostgreSQL plans it at every run, with its parameters and the tables as they are
    then. Otherwise psycopg prepares a statement once it ran a few times on a connection, and
    PostgreSQL keeps the plan it made for it: for a read whose best plan depends on the table's
    size, the plan kept can be one made while the table was small (a young ledger's first
    batches; at most 300 s, the pool's recycle time). In the admission storm the prepared
    request-id lookup took 1.9 ms a batch, planned at every run 0.3 ms (parse and plan
    included): a read through an index gains little from being prepared."""

    sql: str
    params: Any
    replan: bool = False


_SAVEPOINT = "sf_pipeline"


def pipelines(s: Session) -> bool:
    """Whether `pipeline` can run on the session's database: PostgreSQL, through a libpq that has
    pipeline mode (14 and later; psycopg's binary wheel bundles one)."""
    return s.get_bind().dialect.name == "postgresql" and psycopg.Pipeline.is_supported()


def pipeline(s: Session, calls: Sequence[Piped], *, savepoint: bool = False) -> list[list[tuple[Any, ...]]]:
    """Run `calls` in order on the session's PostgreSQL connection, inside its transaction, in one
    round trip (psycopg's pipeline mode) instead of one each; the rows each returned (none for an
    executemany or a statement without rows).

    Each round trip of a busy console costs milliseconds, not PostgreSQL's 0.1 ms: its backend and
    the console's event loop share the machine's cores, and the database thread waits for both
    after every reply (the admission benchmark's group commit: ~4 ms a statement). A failing
    statement raises SQLAlchemy's exception for it (IntegrityError for a unique violation, as an
    execute through the session would); with `savepoint` what the calls did is rolled back and the
    transaction goes on, else the transaction is left failed for the caller to roll back."""
    raw = s.connection().connection.driver_connection
    assert isinstance(raw, psycopg.Connection), "pipeline() is for PostgreSQL (see pipelines())"
    cursors = []
    try:
        with raw.pipeline():
            if savepoint:
                raw.execute(f"SAVEPOINT {_SAVEPOINT}")
            for call in calls:
                cur = raw.cursor()
                if isinstance(call.params, list):
                    assert not call.replan, "psycopg prepares an executemany's statement"
                    cur.executemany(call.sql, call.params)
                else:
                    cur.execute(call.sql, call.params, prepare=False if call.replan else None)
                cursors.append(cur)
            if savepoint:
                raw.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        return [cur.fetchall() if cur.description is not None else [] for cur in cursors]
    except psycopg.Error as e:
        if savepoint and not raw.broken:
            # failing too (the connection lost meanwhile), it leaves the transaction failed, and
            # the caller's next statement raises for it
            with contextlib.suppress(psycopg.Error):
                raw.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                raw.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        if raw.broken:
            s.connection().invalidate(e)  # as SQLAlchemy does for a connection lost under it
        statement = "; ".join(call.sql for call in calls)
        raise DBAPIError.instance(statement, None, e, psycopg.Error) from e


ROWS_PER_STATEMENT = 256


def insert_rows_at_once(s: Session, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """INSERT `rows` with one multi-row VALUES statement per `ROWS_PER_STATEMENT` rows.

    For a group commit's few rows from many runs: SQLite's executemany gives up the GIL at every
    row's step, and taking it back from a busy event loop costs up to the switch interval (5 ms)
    each time; one statement steps once. Runs on the session's connection, inside its transaction.
    """
    for i in range(0, len(rows), ROWS_PER_STATEMENT):
        part = rows[i : i + ROWS_PER_STATEMENT]
        sql, mark = _prefix(s, "INSERT INTO", table)
        one = f"({', '.join([mark] * len(columns))})"
        names = ", ".join(_quote(s, c) for c in columns)
        sql += f" ({names}) VALUES {', '.join([one] * len(part))}"
        s.connection().exec_driver_sql(sql, tuple(v for row in part for v in row))


def update_rows(s: Session, table: str, key: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """UPDATE the rows whose `key` is each row's first value, setting `columns` to its other values:
    one statement (`CASE key WHEN ? THEN ? ...`) per `ROWS_PER_STATEMENT` rows, for the reason
    `insert_rows_at_once` gives. Table and column names are the callers' constants."""
    for i in range(0, len(rows), ROWS_PER_STATEMENT):
        part = rows[i : i + ROWS_PER_STATEMENT]
        sql, mark = _prefix(s, "UPDATE", table)
        k = _quote(s, key)
        sets, params = [], []
        for c, name in enumerate(columns, start=1):
            sets.append(f"{_quote(s, name)} = CASE {k}{f' WHEN {mark} THEN {mark}' * len(part)} END")
            params += [v for row in part for v in (row[0], row[c])]
        sql += f" SET {', '.join(sets)} WHERE {k} IN ({', '.join([mark] * len(part))})"
        s.connection().exec_driver_sql(sql, tuple(params + [row[0] for row in part]))


def _quote(s: Session, name: str) -> str:
    return str(s.get_bind().dialect.identifier_preparer.quote(name))


def _prefix(s: Session, verb: str, table: str) -> tuple[str, str]:
    """`verb` and the quoted table name, and the driver's parameter mark."""
    mark = "?" if s.get_bind().dialect.paramstyle == "qmark" else "%s"
    return f"{verb} {_quote(s, table)}", mark


def read_rows(s: Session, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of a plain SQL read (`?` marks its parameters), run straight on the session's DBAPI
    connection, inside its transaction.

    For the scheduler's statements of every cycle, which read a few rows: SQLAlchemy's statement
    and result handling cost ten times the read itself (bench `queue` profile). A database error is
    raised as SQLAlchemy's own (`OperationalError` when PostgreSQL is unreachable), as `execute`
    would raise it, so `Database.run` still reports the database as unavailable.
    """
    conn = s.connection()
    dialect = conn.dialect
    if dialect.paramstyle != "qmark":
        sql = sql.replace("?", "%s")  # psycopg; the callers' constants have no other `?` or `%`
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # a checked-out connection
    cursor = dbapi.cursor()
    try:
        cursor.execute(sql, tuple(params))
        rows = list(cursor.fetchall())
        return rows
    except dialect.loaded_dbapi.Error as e:
        raise DBAPIError.instance(sql, params, e, dialect.loaded_dbapi.Error, dialect=dialect) from e
    finally:
        cursor.close()
