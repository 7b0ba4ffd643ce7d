"""`python -m bench.ingest_cpu [--batches N]`: the ingest store's CPU per point, in-process.

What the console's DB thread spends on one Report batch of the `ingest` row (10 records of 10
metrics x 100 steps in columns, decoded from its wire bytes as the server decodes it), measured as
`time.thread_time` around the whole transaction (`Database.run_sync` of `ingest.apply_records`:
session, reads, checks, inserts, COMMIT) over batches of 16 runs in rotation, after a warm-up.
No gRPC, no event loop, no other process: on a shared machine this moves far less than the row's
wall rate, so it is the figure to compare trees by (run it with another tree first on PYTHONPATH
to measure that tree's store with this harness). Prints one JSON object: points per CPU second,
CPU per batch and the batches measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from typing import Any

from google.protobuf import timestamp_pb2
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from bench.ingest import POINTS_PER_RECORD, RECORDS_PER_BATCH, _batch, make_runs

RUNS = 16


def _store(s: Any, attempt_id: str, records: list[pb.Record]) -> Any:
    from control.telemetry import ingest

    return ingest.apply_records(s, attempt_id, records, scope_attempt_id=attempt_id)


def _store_group(s: Any, batches: list[tuple[str, list[pb.Record]]]) -> list[Any]:
    """Several runs' batches in one transaction, as the IngestService's group commit stores them."""
    from control.telemetry import ingest, ingest_group

    group = [ingest_group.Batch(a, records, a) for a, records in batches]
    return ingest_group.store(s, group, ingest._no_mask, ingest.DEFAULT_LIMITS)


def measure(batches: int, group: int = 1) -> dict[str, Any]:
    """CPU of the thread that stores `batches` batches (after 2 per run of warm-up), `group`
    batches of as many runs per transaction (`ingest_group.store`) when more than 1."""
    import pathlib

    from control.db.engine import Database

    with tempfile.TemporaryDirectory(prefix="sf-ingest-cpu-") as tmp:
        state = pathlib.Path(tmp)
        runs = make_runs(state, "root", RUNS)
        db = Database(f"sqlite:///{state / 'ledger.db'}")
        seqs = dict.fromkeys((a for a, _ in runs), 0)
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(time.time_ns())
        per_batch: list[float] = []
        try:
            if group > 1:
                return _measure_groups(db, runs, seqs, stamp, batches, group)
            for i in range(batches + 2 * RUNS):
                attempt_id = runs[i % RUNS][0]
                wire = _batch(attempt_id, seqs[attempt_id] + 1, stamp).SerializeToString()
                records = list(pb.ReportRequest.FromString(wire).records)
                seqs[attempt_id] += RECORDS_PER_BATCH
                c0 = time.thread_time()
                applied = db.run_sync(functools.partial(_store, attempt_id=attempt_id, records=records))
                cpu = time.thread_time() - c0
                assert applied.acked_seq == seqs[attempt_id], (applied.acked_seq, seqs[attempt_id])
                if i >= 2 * RUNS:
                    per_batch.append(cpu)
        finally:
            db.close()
    return _figures(per_batch)


def _measure_groups(
    db: Any, runs: list[tuple[str, str]], seqs: dict[str, int], stamp: timestamp_pb2.Timestamp, batches: int, group: int
) -> dict[str, Any]:
    """`measure` with `group` runs' batches per transaction (each run's first batch stored alone)."""
    per_batch: list[float] = []
    for attempt_id, _ in runs:
        wire = _batch(attempt_id, 1, stamp).SerializeToString()
        db.run_sync(
            functools.partial(_store, attempt_id=attempt_id, records=list(pb.ReportRequest.FromString(wire).records))
        )
        seqs[attempt_id] = RECORDS_PER_BATCH
    for i in range(0, batches + 2 * RUNS, group):
        todo = []
        for k in range(i, i + group):
            attempt_id = runs[k % RUNS][0]
            wire = _batch(attempt_id, seqs[attempt_id] + 1, stamp).SerializeToString()
            todo.append((attempt_id, list(pb.ReportRequest.FromString(wire).records)))
            seqs[attempt_id] += RECORDS_PER_BATCH
        c0 = time.thread_time()
        applied = db.run_sync(functools.partial(_store_group, batches=todo))
        cpu = time.thread_time() - c0
        assert [a.acked_seq for a in applied] == [seqs[a] for a, _ in todo]
        if i >= 2 * RUNS:
            per_batch += [cpu / group] * group
    return _figures(per_batch)


def _figures(per_batch: list[float]) -> dict[str, Any]:
    points = len(per_batch) * RECORDS_PER_BATCH * POINTS_PER_RECORD
    return {
        "points_per_cpu_s": points / sum(per_batch),
        "cpu_ms_per_batch_median": statistics.median(per_batch) * 1e3,
        "batches": len(per_batch),
        "points_per_batch": RECORDS_PER_BATCH * POINTS_PER_RECORD,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--group", type=int, default=1, help=f"runs' batches per transaction (1..{RUNS})")
    args = parser.parse_args()
    if not 1 <= args.group <= RUNS:
        parser.error(f"--group must be 1..{RUNS}")
    print(json.dumps(measure(args.batches, args.group)))


if __name__ == "__main__":
    main()
