"""Reads the control plane makes per finished job, per reconcile pass and per scheduler write do
not grow with the queue (SQLite and PostgreSQL).

Each test measures what the database does for one call with a short and with a long queue (or
history) of unrelated jobs: on PostgreSQL the rows it read (`pg_stat_xact_user_tables`, this
transaction's own counts), on SQLite the virtual machine's steps (a progress handler). A read
that goes through every QUEUED or STOPPED job grows by at least one row (and several steps) per
unrelated job; one through an index by a few at most. With 1,000,000 queued jobs the reads these
tests cover took seconds each: the stages of a finished job (`pipeline.on_end`, 2.5-3 s per
finished job), the scheduler's wait records (`jobs.set_wait`, 2.9 s per 10,000 jobs) and a new
job's position (0.1 s per submission batch). The
last test: `/metrics`' queue-depth read, which does go through every QUEUED job, is kept as many
times as long as it took (READ_COST_FACTOR) instead of being repeated at every scrape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_state_pb2 as st

from common import ids
from control import metrics
from control.db import engine
from control.db import models as m
from control.db.engine import Database
from control.ledger import jobs, outcomes, platform
from control.ledger import state_machine as sm
from control.scheduler import dispatch
from tests import factories as f
from tests.integration.ledger.test_group_commit import _new

SHORT, LONG = 200, 1_400  # unrelated jobs before the first and the second measurement
# What a read may grow by between the two measurements: far less than one row (PostgreSQL) or
# five steps (SQLite) per unrelated job, which is what a read through all of them costs.
ROWS_SLACK = 50
STEPS_SLACK = 2_000
PG_ROWS_READ = text(
    "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_xact_user_tables "
    "WHERE relname = 'jobs'"
)


def _work(db: Database, fn: Callable[[Session], Any]) -> int:
    """What the database did for `fn(s)` (and the flush of what it changed), in one transaction."""

    def go(s: Session) -> int:
        conn = s.connection()
        if db.sqlite:
            raw: Any = conn.connection.dbapi_connection
            steps = [0]

            def tick() -> int:
                steps[0] += 1
                return 0  # go on

            raw.set_progress_handler(tick, 10)
            try:
                fn(s)
                s.flush()
            finally:
                raw.set_progress_handler(None, 10)
            return steps[0] * 10
        before = int(conn.execute(PG_ROWS_READ).scalar_one())
        fn(s)
        s.flush()
        return int(conn.execute(PG_ROWS_READ).scalar_one()) - before

    return db.run_sync(go)


def _unrelated(
    db: Database,
    n: int,
    *,
    state: int = sm.QUEUED,
    owner: str = "bob",
    analyze: bool = True,
    request_ids: bool = False,
) -> None:
    """`n` more jobs of another owner in `state`: copies of one made as the factory makes them.
    `analyze`: PostgreSQL's statistics brought up to date, as autovacuum would after a while;
    `request_ids`: each submitted with a request id of its own (as `sf submit` does)."""

    def go(s: Session) -> None:
        template = f.job(s, owner=owner, state=state)
        table = m.Job.__table__
        row = dict(s.execute(select(table).where(table.c.id == template.id)).one()._mapping)
        columns = list(row)
        seq = jobs.reserve_counter(s, "job_seq", n)

        def value(c: str, i: int) -> Any:
            if c == "id":
                return ids.new_job_id()
            if c == "seq":
                return seq + i
            return f"request-{seq + i}" if c == "request_id" and request_ids else row[c]

        rows = [tuple(value(c, i) for c in columns) for i in range(n)]
        engine.insert_rows(s, "jobs", columns, rows)

    db.run_sync(go)
    if analyze and not db.sqlite:  # as autovacuum would: the planner's estimates from the rows there are
        with db.engine.connect() as conn:
            conn.execute(text("ANALYZE jobs"))


def _grows_little(db: Database, short: int, long: int, others: tuple[int, int] = (SHORT, LONG)) -> None:
    slack = STEPS_SLACK if db.sqlite else ROWS_SLACK
    unit = "steps" if db.sqlite else "rows read"
    assert long - short < slack, (
        f"{short} {unit} with {others[0]} other jobs, {long} with {others[1]}: the read goes through them"
    )


def _pipeline_head(db: Database) -> str:
    """A running job with one stage waiting on it."""
    (head,) = db.run_sync(lambda s: jobs.create_jobs(s, [_new(stages=["eval"])]))
    db.run_sync(lambda s: f.attempt(s, jobs.get_job(s, head.job.id), to=sm.RUNNING))
    return head.job.id


def _end(job_id: str, exit_code: int, state: int) -> Callable[[Session], None]:
    def go(s: Session) -> None:
        job = jobs.get_job(s, job_id)
        attempt = jobs.current_attempt(s, job)
        assert attempt is not None
        outcomes.finish_attempt(s, job, attempt, exit_code=exit_code)
        assert job.state == state

    return go


def _stage_of(db: Database, job_id: str) -> m.Job:
    return db.run_sync(lambda s: s.scalars(select(m.Job).where(m.Job.parent_job_id == job_id)).one())


@pytest.mark.parametrize(
    ("exit_code", "state", "stage_state"), [(0, sm.SUCCEEDED, sm.QUEUED), (3, sm.FAILED, sm.STOPPED)]
)
def test_a_finished_job_finds_its_stages_without_reading_the_queue(
    db: Database, exit_code: int, state: int, stage_state: int
) -> None:
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])
    first, second = _pipeline_head(db), _pipeline_head(db)
    _unrelated(db, SHORT)
    short = _work(db, _end(first, exit_code, state))
    _unrelated(db, LONG - SHORT)
    long = _work(db, _end(second, exit_code, state))
    _grows_little(db, short, long)
    for head in (first, second):  # and the stage was released or stopped, as before
        assert _stage_of(db, head).state == stage_state


def test_wait_records_are_read_by_id_not_through_the_queue(db: Database) -> None:
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])
    mine = db.run_sync(lambda s: [f.job(s).id for _ in range(10)])
    _unrelated(db, SHORT)

    def wait(position: int) -> Callable[[Session], None]:
        return lambda s: jobs.set_wait(
            s, {j: (st.WAIT_REASON_CAPACITY, "waiting", position + i) for i, j in enumerate(mine)}
        )

    short = _work(db, wait(1))
    _unrelated(db, LONG - SHORT)
    long = _work(db, wait(2))
    _grows_little(db, short, long)
    assert db.run_sync(lambda s: [jobs.get_job(s, j).queue_position for j in mine]) == list(range(2, 12))


def test_the_platforms_stops_are_found_without_reading_every_stopped_job(db: Database) -> None:
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])

    def window_stopped(s: Session) -> str:
        job = f.job(s, state=sm.STOPPED)
        job.stopped_by = platform.WINDOW
        return job.id

    first = db.run_sync(window_stopped)
    _unrelated(db, SHORT, state=sm.STOPPED)  # stopped by their owner: never queued again by the platform
    short = _work(db, lambda s: platform.requeue(s, {}))
    second = db.run_sync(window_stopped)
    _unrelated(db, LONG - SHORT, state=sm.STOPPED)
    long = _work(db, lambda s: platform.requeue(s, {}))
    _grows_little(db, short, long)
    states = db.run_sync(lambda s: [jobs.get_job(s, j).state for j in (first, second)])
    assert states == [sm.QUEUED, sm.QUEUED], "and they were queued again, as before"


@pytest.mark.parametrize("cost", [0.0, 3600.0])
def test_a_slow_queue_depth_read_is_not_repeated_at_every_scrape(db: Database, cost: float) -> None:
    db.run_sync(lambda s: f.user(s, "alice"))
    collector = metrics.LedgerCollector(db, cache_seconds=0.0)

    def depth() -> float:
        (family,) = [fam for fam in collector.collect() if fam.name == "starforge_queue_depth"]
        return sum(sample.value for sample in family.samples)

    assert depth() == 0
    collector._cost = cost  # as if the last read had taken that long
    db.run_sync(f.job)
    time.sleep(0.01)
    assert depth() == (0 if cost else 1), "a read kept READ_COST_FACTOR times its cost, at least"


def test_a_submissions_position_counts_at_most_AHEAD_COUNTED_jobs(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new job's position (FIFO within priority until the scheduler ranks it) is counted up to
    jobs.AHEAD_COUNTED jobs ahead, and unknown (0) past that: counting the whole queue was 0.1 s
    per submission batch and per job shown at 1,000,000 queued."""
    monkeypatch.setattr(jobs, "AHEAD_COUNTED", 100)
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])

    def submit() -> tuple[int, int]:
        def go(s: Session) -> tuple[int, int]:
            (queued,) = jobs.create_jobs(s, [_new()])
            return queued.queue_position, dispatch.queue_position(s, jobs.get_job(s, queued.job.id))

        return db.run_sync(go)

    _unrelated(db, 50)  # and the copies' template: 51 jobs ahead
    assert submit() == (52, 52), "counted, as before"
    short = _work(db, lambda s: jobs.create_jobs(s, [_new()]))
    _unrelated(db, LONG)
    long = _work(db, lambda s: jobs.create_jobs(s, [_new()]))
    _grows_little(db, short, long, (52, 53 + LONG))
    assert submit() == (0, 0), "past the count: unknown until the scheduler ranks it"


def test_a_listings_positions_stop_counting_once_one_is_past_the_limit(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of jobs gets the positions each would get alone, but once one of a (queue, priority)
    is past jobs.AHEAD_COUNTED the ones after it are not counted: a normal user's listing of
    1,000 such jobs was 1,000 counts, 1.3-1.8 s of the database thread at 1,000,000 queued."""
    monkeypatch.setattr(jobs, "AHEAD_COUNTED", 100)
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])
    near = db.run_sync(lambda s: [f.job(s).id for _ in range(5)])  # counted: 0-4 ahead
    _unrelated(db, 150)
    far = db.run_sync(lambda s: [f.job(s).id for _ in range(40)])  # past the limit

    def page(ids: list[str]) -> Callable[[Session], dict[str, int]]:
        return lambda s: dispatch.queue_positions(s, [jobs.get_job(s, j) for j in ids])

    def positions_of(ids: list[str]) -> int:  # the page's positions, less reading its jobs
        return _work(db, page(ids)) - _work(db, lambda s: [jobs.get_job(s, j) for j in ids])

    alone = db.run_sync(lambda s: {j: dispatch.queue_position(s, jobs.get_job(s, j)) for j in near + far})
    assert db.run_sync(page(near + far)) == alone
    assert [alone[j] for j in near] == [1, 2, 3, 4, 5] and not any(alone[j] for j in far)
    _grows_little(db, positions_of(far[:2]), positions_of(far), (2, 40))


def test_the_schedulers_full_read_takes_each_owners_head_not_the_queue(db: Database) -> None:
    """The scheduler's full read (every owner's first PER_OWNER jobs): on PostgreSQL it once went
    through every QUEUED job of the queue for each one it returned (the owner's head of line as an
    `IN` subquery, planned as a filter over a scan of the table), 0.2-0.6 s a cycle at 7,000
    queued; at every cycle while the queue is small in owners, such as one user's storm."""
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])
    mine = db.run_sync(lambda s: f.job(s).id)
    _unrelated(db, SHORT)
    now = time.time() + 1

    def read(s: Session) -> None:
        got = dispatch._candidates(s, now)
        by_owner = {o: [c.job_id for c in got if c.owner == o] for o in ("alice", "bob")}
        assert by_owner["alice"] == [mine]
        assert len(by_owner["bob"]) == dispatch.PER_OWNER

    short = _work(db, read)
    _unrelated(db, LONG - SHORT)
    long = _work(db, read)
    _grows_little(db, short, long)


def _batch_with_request_ids(db: Database, tag: str) -> Callable[[Session], None]:
    """A batch of alice's submissions, each with a request id. On PostgreSQL a statement psycopg
    prepares is prepared at its first run and planned for any parameters (the plan it would keep
    after a few runs); the old lookup read every job of alice's both so and sent unprepared."""

    def go(s: Session) -> None:
        if not db.sqlite:
            raw = s.connection().connection.driver_connection
            raw.prepare_threshold = 0  # type: ignore[union-attr]
            s.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        queued = jobs.create_jobs(s, [_new(f"{tag}-{i}") for i in range(8)])
        assert all(q.created for q in queued)

    return go


def test_a_batch_looks_its_request_ids_up_without_reading_the_owners_other_jobs(db: Database) -> None:
    """A batch's request ids already queued are looked up one by one in the (owner, request_id)
    index. On PostgreSQL the lookup was `request_id = ANY(...)`, planned as the index by owner
    alone and the ids as a filter whenever the statistics did not know the owner had many jobs
    (a young ledger, one user's storm): every job of the owner read for every batch, 2-6 ms a
    batch at 9,000 jobs in the admission benchmark, its storm's most expensive statement."""
    db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])
    # the statistics know bob's jobs and none of alice's, who has since finished many (out of the
    # queue, whose positions are counted up to AHEAD_COUNTED), each with its request id
    _unrelated(db, SHORT, state=sm.SUCCEEDED)
    _unrelated(db, SHORT, owner="alice", state=sm.SUCCEEDED, analyze=False, request_ids=True)
    short = _work(db, _batch_with_request_ids(db, "short"))
    _unrelated(db, LONG, owner="alice", state=sm.SUCCEEDED, analyze=False, request_ids=True)
    long = _work(db, _batch_with_request_ids(db, "long"))
    _grows_little(db, short, long, (SHORT, SHORT + LONG))
    again = db.run_sync(lambda s: jobs.create_jobs(s, [_new("long-3"), _new("long-9")]))
    assert [q.created for q in again] == [False, True], "a known request id is still found"


@pytest.mark.postgres
def test_a_batchs_reads_are_planned_at_every_run_on_postgresql(pg_url: str) -> None:
    """The reads of a batch whose best plan depends on the table's size (its request ids, the
    count of jobs ahead) are never prepared: psycopg prepares a statement run five times on a
    connection, and in the admission benchmark's storm (a young ledger growing by ~700 jobs a
    second) the prepared lookup took 1.9 ms a batch, 40 ms at its p99, against 0.3 ms planned at
    each run (parse and plan included)."""
    from tests.db import _truncate

    db = Database(pg_url)
    try:
        _truncate(db)
        db.run_sync(lambda s: [f.user(s, n) for n in ("alice", "bob")])

        def batch(tag: str) -> Callable[[Session], list[jobs.Queued]]:
            return lambda s: jobs.create_jobs(s, [_new(f"{tag}-{i}") for i in range(3)])

        for b in range(12):  # on the pool's one connection (one thread, one call at a time)
            db.run_sync(batch(f"b{b}"))

        def prepared(s: Session) -> list[str]:
            return list(s.execute(text("SELECT statement FROM pg_prepared_statements")).scalars())

        statements = db.run_sync(prepared)
        assert any(sql.startswith("INSERT INTO jobs") for sql in statements), "the inserts are prepared"
        assert not [sql for sql in statements if sql.lstrip().startswith("SELECT")], statements
    finally:
        db.close()
