"""Metric points in columns (MetricColumns) on SQLite and PostgreSQL: stored once per (attempt, seq),
read back merged with points sent one message each and with points stored before the column store,
bounded like points (NaN, name length, points per record, mismatched columns, bad times)."""

from __future__ import annotations

import math

import pytest
from sqlalchemy.orm import Session
from starforge_api.ingest.v1 import ingest_service_pb2 as ing
from starforge_api.job.v1 import telemetry_pb2

from common import errors
from control.db import models as m
from control.db.engine import Database, insert_rows
from control.ledger import state_machine as sm
from control.telemetry import ingest, logs, metrics
from control.telemetry.bounds import IngestLimits
from tests import factories as f


def columns_record(
    seq: int, *cols: ing.MetricColumns, points: list[telemetry_pb2.MetricPoint] | None = None
) -> ing.Record:
    return f.record(seq, metrics=ing.MetricBatch(columns=list(cols), points=points or []))


def col(name: str, steps: list[int], values: list[float], times: list[float] | None = None) -> ing.MetricColumns:
    return ing.MetricColumns(name=name, steps=steps, values=values, times=times or [])


def new_attempt(db: Database) -> str:
    return str(db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.PENDING).id))


def points_of(db: Database, job_id: str, **kw: object) -> dict[str, list[tuple[int, float]]]:
    series = db.run_sync(lambda s: metrics.series(s, job_id, **kw))  # type: ignore[arg-type]
    return {ser.name: [(p.step, p.value) for p in ser.points] for ser in series}


def test_columns_are_stored_once_and_read_back(db: Database) -> None:
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    batch = [
        columns_record(1, col("loss", [1, 2, 3], [0.9, 0.8, 0.7]), col("acc", [1, 2, 3], [0.1, 0.2, 0.3])),
        f.log_record(2, "between"),
        columns_record(
            3, col("loss", [4, 5], [0.6, 0.5]), points=[telemetry_pb2.MetricPoint(step=4, name="lr", value=1e-3)]
        ),
    ]
    first = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    again = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    assert (first.acked_seq, first.metrics_added) == (3, 9)
    assert (again.acked_seq, again.metrics_added) == (3, 0)
    assert points_of(db, job_id) == {
        "acc": [(1, 0.1), (2, 0.2), (3, 0.3)],
        "loss": [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5)],
        "lr": [(4, 1e-3)],
    }
    assert db.run_sync(lambda s: metrics.count(s, job_id)) == 9
    assert points_of(db, job_id, names=["loss"], after_step=3) == {"loss": [(4, 0.6), (5, 0.5)]}
    assert points_of(db, job_id, names=["loss"], max_points=2) == {"loss": [(1, 0.9), (5, 0.5)]}


def test_times_are_kept_or_replaced_by_the_records(db: Database) -> None:
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    rec = columns_record(
        1,
        col("a", [1, 2, 3], [1.0, 2.0, 3.0], [1700000000.5, 0.0, 1e300]),
        col("b", [1, 2], [1.0, 2.0]),  # no times
        col("c", [1, 2], [1.0, 2.0], [1700000000.0]),  # a times column of another length
    )
    at = rec.time.seconds + rec.time.nanos / 1e9
    db.run_sync(lambda s: ingest.apply_records(s, aid, [rec], scope_attempt_id=None))
    series = {ser.name: ser for ser in db.run_sync(lambda s: metrics.series(s, job_id))}
    times = {name: [p.time.seconds + p.time.nanos / 1e9 for p in ser.points] for name, ser in series.items()}
    assert times["a"][0] == 1700000000.5
    assert all(math.isclose(t, at, abs_tol=1e-6) for t in times["a"][1:] + times["b"] + times["c"])


def test_columns_are_bounded_like_points(db: Database) -> None:
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    batch = [
        columns_record(1, col("loss", [1, 2, 3], [0.5, math.nan, 0.25])),
        columns_record(2, col("x" * 201, [1], [1.0]), col("ok", [1, 2, 3], [1.0, 2.0])),
        columns_record(3, col("many", list(range(8)), [float(i) for i in range(8)])),
    ]
    limits = IngestLimits(max_points_per_record=5)
    applied = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None, limits=limits))
    assert applied.acked_seq == 3
    assert points_of(db, job_id) == {
        "loss": [(1, 0.5), (3, 0.25)],
        "ok": [(1, 1.0), (2, 2.0)],
        "many": [(i, float(i)) for i in range(5)],
    }
    lines = db.run_sync(lambda s: [r.text for r in logs.after(s, job_id, None)])
    assert "starforge: metric value NaN not stored: loss at step 2" in lines
    assert any("names are at most 200 characters" in line for line in lines)
    assert any("'ok': 3 steps and 2 values; the first 2 points were stored" in line for line in lines)
    assert any("more than 5 values; the first 5 were stored, 3 dropped" in line for line in lines)


def test_latest_attempt_wins_and_points_stored_before_the_columns_are_read(db: Database) -> None:
    first = new_attempt(db)
    job_id = first.split(".")[0]
    # a point stored before the column store existed, one row in metric_points
    db.run_sync(
        lambda s: insert_rows(
            s,
            m.MetricPoint.__tablename__,
            ("job_id", "attempt_number", "step", "name", "value", "at"),
            [(job_id, 1, 1, "loss", 9.0, 1700000000.0), (job_id, 1, 2, "loss", 8.0, 1700000000.0)],
        )
    )
    db.run_sync(
        lambda s: ingest.apply_records(
            s, first, [columns_record(1, col("loss", [2, 3, 3], [0.8, 0.7, 0.65]))], scope_attempt_id=None
        )
    )

    # a second attempt (a resumed run) repeats step 3 after its checkpoint
    later = metrics.Columns()
    later.add("loss", [3, 4], [0.6, 0.5], [1700000001.0, 1700000002.0])
    db.run_sync(lambda s: metrics.append(s, job_id, 2, later))
    assert points_of(db, job_id) == {"loss": [(1, 9.0), (2, 0.8), (3, 0.6), (4, 0.5)]}
    assert db.run_sync(lambda s: metrics.count(s, job_id)) == 7


def test_steps_of_any_shape_read_back(db: Database) -> None:
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    rec = columns_record(
        1,
        col("every10", [10, 20, 30, 40], [1.0, 2.0, 3.0, 4.0]),
        col("one", [7], [7.0]),
        col("unordered", [5, 3, 9, 3], [5.0, 3.0, 9.0, 3.5]),
        col("repeated", [2, 2], [1.0, 2.0]),
    )
    db.run_sync(lambda s: ingest.apply_records(s, aid, [rec], scope_attempt_id=None))
    assert points_of(db, job_id) == {
        "every10": [(10, 1.0), (20, 2.0), (30, 3.0), (40, 4.0)],
        "one": [(7, 7.0)],
        "unordered": [(3, 3.5), (5, 5.0), (9, 9.0)],
        "repeated": [(2, 2.0)],
    }
    assert points_of(db, job_id, names=["every10"], after_step=25) == {"every10": [(30, 3.0), (40, 4.0)]}


def test_downsampling_keeps_the_shape(db: Database) -> None:
    """max_points keeps the first and last point and each bucket's extremes, so a one-step spike
    or dip survives; the usual series (read straight from the columns) and a resumed one (steps
    reported twice, merged per step) are cut alike."""
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    values = [1.0] * 1000
    values[417], values[733] = 50.0, -50.0
    batch = [columns_record(i + 1, col("loss", list(range(i * 100, i * 100 + 100)), values[i * 100 : i * 100 + 100]))
             for i in range(10)]  # fmt: skip
    db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    got = points_of(db, job_id, max_points=20)["loss"]
    assert len(got) <= 20
    assert got[0] == (0, 1.0) and got[-1] == (999, 1.0)
    assert (417, 50.0) in got and (733, -50.0) in got
    assert [p[0] for p in got] == sorted({p[0] for p in got})
    assert points_of(db, job_id, max_points=1)["loss"] == [(999, 1.0)]
    assert points_of(db, job_id, max_points=0)["loss"] == list(enumerate(values))
    tail = points_of(db, job_id, after_step=950, max_points=4)["loss"]
    assert tail[0] == (951, 1.0) and tail[-1] == (999, 1.0) and len(tail) <= 4
    assert points_of(db, job_id, after_step=990)["loss"] == [(s, 1.0) for s in range(991, 1000)]
    # a step reported again later (a resume repeating steps): the last report wins, shape kept
    db.run_sync(
        lambda s: ingest.apply_records(s, aid, [columns_record(11, col("loss", [500], [99.0]))], scope_attempt_id=None)
    )
    got = points_of(db, job_id, max_points=20)["loss"]
    assert (500, 99.0) in got and (733, -50.0) in got and got[-1] == (999, 1.0) and len(got) <= 20


def test_a_step_range_reads_at_full_resolution(db: Database) -> None:
    """after_step and up_to_step bound a zoomed chart's range, on both read paths."""
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    batch = [columns_record(i + 1, col("loss", list(range(i * 10, i * 10 + 10)), [float(i * 10 + j) for j in range(10)]))
             for i in range(10)]  # fmt: skip
    db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    assert points_of(db, job_id, after_step=33, up_to_step=57)["loss"] == [(s, float(s)) for s in range(34, 58)]
    assert points_of(db, job_id, up_to_step=4)["loss"] == [(s, float(s)) for s in range(5)]
    got = points_of(db, job_id, after_step=9, up_to_step=89, max_points=10)["loss"]
    assert got[0] == (10, 10.0) and got[-1] == (89, 89.0) and len(got) <= 10
    assert points_of(db, job_id, after_step=99, up_to_step=200) == {}
    # merged per step (a step reported twice): the same bounds
    db.run_sync(
        lambda s: ingest.apply_records(s, aid, [columns_record(11, col("loss", [40], [-1.0]))], scope_attempt_id=None)
    )
    assert points_of(db, job_id, after_step=38, up_to_step=41)["loss"] == [(39, 39.0), (40, -1.0), (41, 41.0)]
    assert points_of(db, job_id, up_to_step=1)["loss"] == [(0, 0.0), (1, 1.0)]


def test_a_usual_batch_keeps_every_check(db: Database) -> None:
    """After an attempt's first batch (which makes its cursor), batches without a lifecycle record
    are stored through Core statements: the same order, bounds, scope, replay and signal rules."""
    aid = new_attempt(db)
    job_id = aid.split(".")[0]
    db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(1, "start")], scope_attempt_id=aid))
    rec = columns_record(
        2,
        col("loss", [1, 2], [1.0, 2.0], [1700000000.0, 1700000001.0]),
        col("loss", [3, 4], [math.nan, math.inf]),  # per value: the NaN left out, the infinity kept
        col("loss", [5, 6], [5.0, 6.0], [0.0, 1700000002.0]),  # a time of 0: the record's
        col("acc", [1, 2, 3], [0.1, 0.2, 0.3]),
    )
    applied = db.run_sync(lambda s: ingest.apply_records(s, aid, [rec], scope_attempt_id=aid))
    assert (applied.acked_seq, applied.metrics_added, applied.signal) == (2, 8, ing.CONTROL_SIGNAL_UNSPECIFIED)
    assert points_of(db, job_id) == {
        "acc": [(1, 0.1), (2, 0.2), (3, 0.3)],
        "loss": [(1, 1.0), (2, 2.0), (4, math.inf), (5, 5.0), (6, 6.0)],
    }
    lines = db.run_sync(lambda s: [r.text for r in logs.after(s, job_id, None)])
    assert lines == ["start", "starforge: metric value NaN not stored: loss at step 3"]

    again = db.run_sync(lambda s: ingest.apply_records(s, aid, [rec], scope_attempt_id=aid))  # resent
    assert (again.acked_seq, again.metrics_added) == (2, 0)
    with pytest.raises(errors.PermissionDenied):  # another attempt's token
        db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(3, "x")], scope_attempt_id="j0.1"))
    with pytest.raises(errors.InvalidArgument):  # a gap in the records
        db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(4, "x")], scope_attempt_id=aid))

    def stop(s: Session) -> None:
        job = s.get(m.Job, job_id)
        assert job is not None
        job.desired = sm.STOP

    db.run_sync(stop)
    stopped = db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(3, "y")], scope_attempt_id=aid))
    assert (stopped.acked_seq, stopped.signal) == (3, ing.CONTROL_SIGNAL_STOP)

    def end(s: Session) -> None:
        attempt = s.get(m.Attempt, aid)
        assert attempt is not None
        attempt.state = sm.FAILED

    db.run_sync(end)  # an ended attempt: its telemetry still drains, with no signal
    ended = db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(4, "z")], scope_attempt_id=aid))
    assert (ended.acked_seq, ended.signal) == (4, ing.CONTROL_SIGNAL_UNSPECIFIED)
    cursor = db.run_sync(lambda s: s.get(m.IngestCursor, aid))
    assert cursor is not None
    assert (cursor.acked_seq, cursor.next_log_offset) == (4, 4)
    job_row = db.run_sync(lambda s: s.get(m.Job, job_id))
    assert job_row is not None
    assert job_row.log_bytes == sum(len(line) for line in [*lines, "y", "z"])
