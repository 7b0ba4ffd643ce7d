"""Queue scale: 1,000,000 QUEUED jobs of 1,000 users; the latency of picking the next dispatchable job
and the control plane's memory.

How the rows were made: bulk SQL (sqlite3 executemany) into a ledger migrated by the control plane,
each job row a copy of what `JobsApi.submit` writes for a trivial custom/custom job (same spec bytes,
needs, pools, provenance; own id, owner, seq, created_at) plus its QUEUED JobEvent; users round-robin.
The fleet is drained (as `sf fleet drain` leaves it), so the console places nothing and keeps
computing wait reasons and queue positions for the whole queue.

Pick: the scheduler's decision for one cycle (`Scheduler.decide`, in-process on that ledger, with
one free CPU slot): with a queue this big, a cycle is the fast pass on each owner's head of line,
held in memory since the last full pass and refreshed from what changed (control/scheduler/heads.py).
The full pass (wait reasons and positions for every owner's first 50 jobs, once per
STATUS_REFRESH_SECONDS: from the jobs held in memory, read from the ledger once per
LEDGER_PASS_SECONDS) is reported beside it, both kinds. `STARFORGE_BENCH_QUEUE_JOBS` sets another
queue size (to iterate); `STARFORGE_BENCH_QUICK=1` runs 20,000 jobs of 200 users in seconds.
Memory: peak RSS of the real console process (`sf up`) serving that ledger for several scheduler
cycles.

Peer (a floor, not a scheduler): the globally next job in (priority desc, seq) order, no fair share,
with two index seeks on the same table (top priority, then its lowest seq).

Drain: the same console on the same ledger with its fleet open (the queued jobs' train.sh, `true`,
put in the blob store), so it runs them: jobs SUCCEEDED per second over DRAIN_S once the first one
did, against the same console on a ledger of SMALL_QUEUE jobs. It measures what the pick does not:
everything the database thread does per job and per cycle with the whole queue behind it (the
claim, the full passes' wait records, the end of each job).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import text

from bench.common import QUICK, Result, env_int, fresh_dir, loadavg, log, ratio_higher_better, summary

# STARFORGE_BENCH_QUEUE_JOBS: another queue size while iterating (the table's figure is 1,000,000).
JOBS = env_int("STARFORGE_BENCH_QUEUE_JOBS", 20_000 if QUICK else 1_000_000, minimum=1)
USERS = 200 if QUICK else 1_000
MEMORY_WATCH_S = 3.0 if QUICK else 30.0
ROUNDS = 4 if QUICK else 30
FAST_PER_ROUND = 20 if QUICK else 100  # cycles between two full passes, each timed
DRAIN_S = 5.0 if QUICK else 30.0  # how long the drain is counted, once the first job succeeded
SMALL_QUEUE = 1_000  # the drain's peer: the same console with this many queued (users: USERS // 10)
TRAIN_SH = b"#!/usr/bin/env bash\ntrue\n"  # every queued job's train.sh
FIRST_SUCCESS_S = 180.0  # how long the drain waits for its first job to succeed


def _template() -> dict[str, Any]:
    from starforge_api.job.v1 import job_pb2, job_spec_pb2, workspace_pb2

    from control.ledger import convert
    from recipes.catalog import load_catalog

    recipe = load_catalog().get("custom/custom")
    assert recipe is not None
    spec = job_spec_pb2.JobSpec(
        api_version="forge/v2", project="@user-0000/lab", experiment="exp", method="custom/custom",
        recipe_lock=job_spec_pb2.RecipeLock(method=recipe.name, version=recipe.version, digest=recipe.digest),
        config_json=json.dumps({"image": "host", "observability": "platform"}),
        workspace=workspace_pb2.WorkspaceManifest(files=[workspace_pb2.WorkspaceFile(
            path="experiments/exp/train.sh", sha256=hashlib.sha256(TRAIN_SH).hexdigest(), size=len(TRAIN_SH),
            executable=True)]),
    )  # fmt: skip
    pools = [job_spec_pb2.Pool(name="main", series="cpu", nodes=1, gpus_per_node=0)]
    return {
        "project": "@user-0000/lab", "experiment": "exp", "method": "custom/custom", "state": 1,
        "queue": "default", "priority": 0, "series": "cpu", "gpus": 0,
        "needs": json.dumps({"gpus": {"cpu": 1}, "nodes": {"cpu": 1}}), "eligible_fleets": json.dumps(["local"]),
        "runtime_id": recipe.runtimes[0].runtime_id, "spec": spec.SerializeToString(),
        "pools": convert.pools_to_bytes(pools), "resolved_config": "{}", "image": "host",
        "provenance": job_spec_pb2.Provenance(recipe_digest=recipe.digest).SerializeToString(),
        "fleet": "", "parent_job_id": "", "stage": "", "retry_budget": 0, "retries_used": 0, "request_id": "",
        "wait_reason": 0, "wait_message": "waiting for the scheduler", "queue_position": 0, "stopped_by": "",
        "diagnosis": b"", "desired": "", "labels": "{}", "out_dir": "", "not_before": 0.0, "attempts_count": 0,
        "next_cause": job_pb2.ATTEMPT_CAUSE_INITIAL, "event_seq": 1,
    }  # fmt: skip


def build_ledger(state_dir: Any, n_jobs: int = JOBS, n_users: int = USERS, database_url: str = "") -> str:
    """The ledger of `n_jobs` QUEUED jobs of `n_users` users, the fleet drained: in
    `state_dir`/ledger.db, or in the (empty) PostgreSQL database of `database_url`. Its URL."""
    from control import auth
    from control.db import migrate
    from control.db.engine import Database

    url = database_url or f"sqlite:///{state_dir / 'ledger.db'}"
    db = Database(url)
    migrate.upgrade(db.engine)

    def users(s: Any) -> None:
        auth.create_user(s, "root", admin=True)
        token, _ = auth.issue_token(s, "root", "pat", name="bootstrap")
        (state_dir / "admin-token").write_text(token + "\n")
        for u in range(n_users):
            auth.create_user(s, f"user-{u:04d}")

    db.run_sync(users)
    db.close()
    t = _template()
    cols = ["id", "owner", "seq", "created_at", "updated_at", *t]
    now = time.time()
    chunks = _rows(tuple(t.values()), n_jobs, n_users, now)
    if database_url:
        _insert_postgres(database_url, cols, chunks, n_jobs, now)
    else:
        _insert_sqlite(state_dir / "ledger.db", cols, chunks, n_jobs, now)
    return url


Chunk = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]  # jobs rows, their QUEUED events


def _rows(fixed: tuple[Any, ...], n_jobs: int, n_users: int, now: float) -> Iterator[Chunk]:
    from common import ids

    chunk = 50_000
    for start in range(0, n_jobs, chunk):
        rows = []
        events = []
        for i in range(start, min(n_jobs, start + chunk)):
            at = now - n_jobs + i
            # the id format of common.ids.new_job_id (time-sortable), made unique by construction
            job_id = "j" + ids._b32(int(at * 1000), 8) + ids._b32(i, 5)
            owner = f"user-{i % n_users:04d}"
            rows.append((job_id, owner, i + 1, at, at, *_owned(fixed, owner)))
            events.append((job_id, 1, "", 0, 1, at, "admitted", False))
        yield rows, events


_EVENT_COLUMNS = "job_id, seq, attempt_id, from_state, to_state, at, reason, attempt_only"


def _insert_sqlite(path: pathlib.Path, cols: list[str], chunks: Iterator[Chunk], n_jobs: int, now: float) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "INSERT INTO fleet_states (name, state, reason, updated_at) VALUES ('local', 2, 'benchmark', ?)", (now,)
    )
    job_sql = f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    ev_sql = f"INSERT INTO job_events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    for rows, events in chunks:
        conn.executemany(job_sql, rows)
        conn.executemany(ev_sql, events)
        conn.commit()
    conn.execute("INSERT INTO counters (name, value) VALUES ('job_seq', ?)", (n_jobs,))
    conn.commit()
    conn.close()


def _insert_postgres(url: str, cols: list[str], chunks: Iterator[Chunk], n_jobs: int, now: float) -> None:
    """The same rows with COPY, then ANALYZE (as autovacuum would after such a load)."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute(
            "INSERT INTO fleet_states (name, state, reason, updated_at) VALUES ('local', 2, 'benchmark', %s)", (now,)
        )
        with conn.cursor() as cur:
            for rows, events in chunks:
                with cur.copy(f"COPY jobs ({', '.join(cols)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                with cur.copy(f"COPY job_events ({_EVENT_COLUMNS}) FROM STDIN") as copy:
                    for event in events:
                        copy.write_row(event)
        conn.execute("INSERT INTO counters (name, value) VALUES ('job_seq', %s)", (n_jobs,))
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE jobs")
        conn.execute("ANALYZE job_events")


def _owned(fixed: tuple[Any, ...], owner: str) -> tuple[Any, ...]:
    return (fixed[0].replace("user-0000", owner), *fixed[1:])


# The floor's second seek: the next job of the top priority (the first: that priority).
_FLOOR_NEXT = text("SELECT id FROM jobs WHERE state = 1 AND queue = 'default' AND priority = :p ORDER BY seq LIMIT 1")


def measure_pick(db_url: str, rounds: int = ROUNDS, budget_s: float = 60.0) -> dict[str, Any]:
    """One scheduler cycle's decision (`Scheduler.decide`, the real code, in-process), with one free
    CPU slot: with a queue this big that is the fast pass on each owner's head of line (held in
    memory since the last full pass, refreshed from what changed). Each round makes a full pass
    reading the ledger (every owner's first 50 jobs, wait reasons and positions; once per
    LEDGER_PASS_SECONDS in the console) and one from the jobs held in memory (once per
    STATUS_REFRESH_SECONDS), both timed, then FAST_PER_ROUND cycles, each timed. Nothing is
    claimed: each round's transaction is rolled back. The 1-minute load average is read between
    rounds."""
    from types import SimpleNamespace

    from control.config import FleetConfig, InventoryConfig
    from control.db.engine import Database
    from control.scheduler import dispatch

    fleets = [FleetConfig(name="local", kind="local", address="", inventory=[InventoryConfig("cpu", 1, 0, 1)])]
    cfg = SimpleNamespace(fleets=fleets, quotas=[], fair_share_half_life_seconds=3600.0)
    db = Database(db_url)
    ctx = SimpleNamespace(cfg=cfg, executors=SimpleNamespace(status={}), db=db)
    sched = dispatch.Scheduler(ctx)  # type: ignore[arg-type]
    times: list[float] = []
    cpu: list[float] = []  # the same cycles' CPU time (thread): what the wall time is without the machine's load
    full: list[float] = []  # full passes from the heads held in memory (wait reasons, positions)
    ledger: list[float] = []  # full passes that read the heads from the ledger (the backstop)
    floor: list[float] = []
    loads = [loadavg()[0]]
    picked = ""
    candidates = 0
    deadline = time.monotonic() + budget_s
    with db.engine.connect() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM jobs").all()  # warm the page cache like a running server
    try:
        while len(full) < rounds and (time.monotonic() < deadline or len(full) < 3):
            with db.sessions() as s:
                s.connection().exec_driver_sql("UPDATE fleet_states SET state = 1")  # open for this round
                for kind in (ledger, full):
                    sched._status_at = 0.0  # a full pass (as every STATUS_REFRESH_SECONDS) ...
                    if kind is ledger:
                        sched._ledger_at = 0.0  # ... reading the ledger (as every LEDGER_PASS_SECONDS)
                    t0 = time.perf_counter()
                    decision, was_full = sched.decide(s, time.time())
                    kind.append(time.perf_counter() - t0)
                    candidates = len(decision.waiting) + len(decision.placed)
                    assert was_full
                    # freed here, as the scheduler frees it at the end of its full pass: the first
                    # timed cycle used to pay for freeing 50,000 wait reasons (~10 ms at p99)
                    del decision
                for _ in range(FAST_PER_ROUND):
                    sched._status_at = time.time()  # cycles between two refreshes
                    t0, c0 = time.perf_counter(), time.thread_time()
                    decision, was_full = sched.decide(s, time.time())
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.thread_time() - c0)
                    assert not was_full, "expected the fast pass"
                    assert len(decision.placed) == 1, decision
                    picked = decision.placed[0][0]
                t1 = time.perf_counter()
                conn = s.connection()
                top = conn.exec_driver_sql("SELECT max(priority) FROM jobs WHERE state = 1 AND queue = 'default'")
                conn.execute(
                    _FLOOR_NEXT,
                    {"p": top.scalar_one()},
                ).all()
                floor.append(time.perf_counter() - t1)
                s.rollback()
            loads.append(loadavg()[0])
    finally:
        db.close()
    return {
        "pick": summary(times),
        "pick_cpu": summary(cpu),
        "full_pass": summary(full),
        "ledger_pass": summary(ledger),
        "load_1min": {"min": min(loads), "max": max(loads)},
        "floor": summary(floor),
        "picked": picked,
        "full_pass_candidates": candidates,
    }


def measure_memory(state_dir: Any) -> dict[str, float]:
    from bench.console import running_console

    with running_console(state_dir) as console:
        time.sleep(MEMORY_WATCH_S)
        mem = console.memory()
        log_tail = (state_dir / "console.log").read_text(errors="replace")[-500:]
    return {**mem, "watched_s": MEMORY_WATCH_S, "log_bytes": float(len(log_tail))}


def _open_with_train_sh(state_dir: pathlib.Path) -> None:
    """The queued jobs' train.sh in the console's blob store, and the fleet no longer drained."""
    digest = hashlib.sha256(TRAIN_SH).hexdigest()
    blob = state_dir / "blobs" / digest[:2] / digest
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(TRAIN_SH)
    blob.chmod(0o444)
    conn = sqlite3.connect(state_dir / "ledger.db")
    conn.execute("DELETE FROM fleet_states")
    conn.commit()
    conn.close()


def _count(conn: sqlite3.Connection, state: int) -> int:
    return int(conn.execute("SELECT count(*) FROM jobs WHERE state = ?", (state,)).fetchone()[0])


def measure_drain(state_dir: pathlib.Path) -> dict[str, float]:
    """Jobs SUCCEEDED per second by the console on this ledger, its fleet open (see the module's
    docstring): counted for DRAIN_S from the first success (the node's first job starts its runner)."""
    from starforge_api.job.v1 import job_state_pb2 as st

    from bench.console import running_console

    _open_with_train_sh(state_dir)
    with running_console(state_dir) as console:
        conn = sqlite3.connect(f"file:{state_dir / 'ledger.db'}?mode=ro", uri=True)
        try:
            deadline = time.monotonic() + FIRST_SUCCESS_S
            while _count(conn, st.JOB_STATE_SUCCEEDED) == 0:
                if time.monotonic() > deadline or console.proc.poll() is not None:
                    tail = (state_dir / "console.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(
                        f"queue: no job succeeded within {FIRST_SUCCESS_S:.0f} s of the console's start:\n{tail}"
                    )
                time.sleep(0.2)
            n0, t0 = _count(conn, st.JOB_STATE_SUCCEEDED), time.monotonic()
            time.sleep(DRAIN_S)
            n1, t1 = _count(conn, st.JOB_STATE_SUCCEEDED), time.monotonic()
            failed = _count(conn, st.JOB_STATE_FAILED)
        finally:
            conn.close()
    return {"per_s": (n1 - n0) / (t1 - t0), "succeeded": float(n1 - n0), "window_s": t1 - t0, "failed": float(failed)}


def measure_postgres_pick(state_dir: pathlib.Path) -> dict[str, Any]:
    """The pick on the same queue in a fresh PostgreSQL database (the ledger of replicas)."""
    from bench.admission import pg_database

    state_dir.mkdir()
    with pg_database() as database_url:
        t0 = time.monotonic()
        url = build_ledger(state_dir, database_url=database_url)
        log(f"queue: {JOBS} jobs of {USERS} users copied into PostgreSQL in {time.monotonic() - t0:.0f} s")
        pick = measure_pick(url)
    log(f"queue: PostgreSQL pick p50 {pick['pick']['p50'] * 1000:.1f} ms p99 {pick['pick']['p99'] * 1000:.1f} ms")
    full, ledger = pick["full_pass"], pick["ledger_pass"]
    log(
        f"queue: PostgreSQL full pass p50 {full['p50'] * 1000:.0f} ms from memory, "
        f"{ledger['p50'] * 1000:.0f} ms reading the ledger"
    )
    return pick


def _pick_row(name: str, database: str, pick: dict[str, Any]) -> Result:
    p99 = pick["pick"]["p99"]
    return Result(
        name=name,
        metric=f"pick next dispatchable job, {JOBS:,} queued / {USERS:,} users{database}, p99",
        figure=p99,
        unit="s",
        peer="floor: next job by (priority desc, seq), two index seeks, no fair share, p99",
        peer_figure=pick["floor"]["p99"],
        ratio=p99 / pick["floor"]["p99"] if pick["floor"]["p99"] else None,
        ratio_note="ours / floor, lower is better",
        target="p99 <= 0.005 s",
        met=p99 <= 0.005,
        command="python -m bench queue",
        details={"pick": pick, "jobs": JOBS, "users": USERS},
    )


def run() -> list[Result]:
    work = fresh_dir("queue")
    state = work / "console"
    state.mkdir()
    t0 = time.monotonic()
    url = build_ledger(state)
    log(f"queue: {JOBS} jobs of {USERS} users inserted in {time.monotonic() - t0:.0f} s")
    pick = measure_pick(url)
    log(f"queue: pick p50 {pick['pick']['p50'] * 1000:.1f} ms p99 {pick['pick']['p99'] * 1000:.1f} ms")
    cpu = pick["pick_cpu"]
    log(f"queue: pick CPU time p50 {cpu['p50'] * 1000:.2f} ms p99 {cpu['p99'] * 1000:.2f} ms ({cpu['n']} cycles)")
    full, ledger = pick["full_pass"], pick["ledger_pass"]
    log(
        f"queue: full pass ({pick['full_pass_candidates']} candidates) p50 {full['p50'] * 1000:.0f} ms from memory, "
        f"{ledger['p50'] * 1000:.0f} ms reading the ledger"
    )
    load = pick["load_1min"]
    log(f"queue: 1-minute load average {load['min']:.1f}-{load['max']:.1f} during the pick")
    memory = measure_memory(state)
    log(f"queue: console peak RSS {memory['control_peak_mib']:.0f} MiB")
    drain = measure_drain(state)
    small, small_jobs = work / "small", min(SMALL_QUEUE, JOBS)
    small.mkdir()
    build_ledger(small, small_jobs, max(1, USERS // 10))
    small_drain = measure_drain(small)
    log(
        f"queue: {drain['per_s']:.1f} jobs SUCCEEDED/s with {JOBS:,} queued, "
        f"{small_drain['per_s']:.1f} with {small_jobs:,} ({drain['failed']:.0f} and "
        f"{small_drain['failed']:.0f} failed)"
    )
    pg_pick = measure_postgres_pick(work / "postgresql")
    return [
        _pick_row("queue-pick", "", pick),
        _pick_row("queue-pick-postgresql", ", PostgreSQL", pg_pick),
        Result(
            name="queue-memory",
            metric=f"control plane peak RSS with {JOBS:,} queued jobs",
            figure=memory["control_peak_mib"],
            unit="MiB",
            peer="",
            peer_figure=None,
            ratio=None,
            ratio_note="",
            target="<= 1024 MiB",
            met=memory["control_peak_mib"] <= 1024,
            command="python -m bench queue",
            details={"memory": memory},
        ),
        Result(
            name="queue-drain",
            metric=f"jobs SUCCEEDED/s with {JOBS:,} queued / {USERS:,} users, fleet open (trivial jobs)",
            figure=drain["per_s"],
            unit="jobs/s",
            peer=f"the same console with {small_jobs:,} queued",
            peer_figure=small_drain["per_s"],
            ratio=ratio_higher_better(drain["per_s"], small_drain["per_s"]),
            ratio_note=f"{JOBS:,} queued / {small_jobs:,} queued",
            target="(reported)",
            met=None,
            command="python -m bench queue",
            details={"drain": drain, "small_queue_drain": small_drain},
        ),
    ]
