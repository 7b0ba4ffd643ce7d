"""Ingest bounds on SQLite and PostgreSQL: cut lines, the per-job quota and its counters are applied
exactly once per (attempt, seq), like the records themselves."""

from __future__ import annotations

from control.db import models as m
from control.db.engine import Database
from control.ledger import state_machine as sm
from control.telemetry import ingest, logs
from control.telemetry.bounds import IngestLimits
from tests import factories as f

LIMITS = IngestLimits(max_line_bytes=256, log_quota_bytes=1000)


def test_cut_lines_and_the_quota_apply_once_per_record(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.PENDING).id)
    job_id = aid.split(".")[0]
    batch = [
        f.log_record(1, "a" * 300),  # cut: 256 bytes + marker
        f.log_record(2, *(f"{i:04d}" + "b" * 96 for i in range(10))),  # 100 bytes each
        f.log_record(3, "late"),
    ]
    first = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None, limits=LIMITS))
    again = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None, limits=LIMITS))
    assert first.acked_seq == again.acked_seq == 3
    assert again.logs_added == 0
    texts = db.run_sync(lambda s: [r.text for r in logs.after(s, job_id, None)])
    assert texts[0] == "a" * 256 + "… [starforge: line cut, 44 bytes dropped]"
    stored = texts[1:-1]
    assert stored == [f"{i:04d}" + "b" * 96 for i in range(len(stored))]
    used = len(texts[0].encode()) + 100 * len(stored)
    assert used <= 1000 < used + 100
    assert texts[-1].startswith("starforge: this job's log reached its quota of 1000 bytes")
    row = db.run_sync(lambda s: s.get(m.Job, job_id))
    assert row is not None
    assert row.log_bytes == used
    assert row.log_dropped_bytes == 100 * (10 - len(stored)) + len("late")

    # a later batch adds to the count, and no second marker
    more = db.run_sync(
        lambda s: ingest.apply_records(s, aid, [f.log_record(4, "xyz")], scope_attempt_id=None, limits=LIMITS)
    )
    assert more.logs_added == 0
    row = db.run_sync(lambda s: s.get(m.Job, job_id))
    assert row is not None and row.log_dropped_bytes == 100 * (10 - len(stored)) + len("late") + 3
    texts = db.run_sync(lambda s: [r.text for r in logs.after(s, job_id, None)])
    assert sum("reached its quota" in t for t in texts) == 1
