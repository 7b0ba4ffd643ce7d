"""Ingest: metric points accepted and stored per second from 100 concurrent runs.

Ours: the real embedded console (its own process, SQLite ledger). 100 runs exist in the ledger as
dispatch leaves them (a job row, an ended attempt, a run token scoped to the attempt: made with the
control plane's own models and `auth.issue_run_token` before the console starts; ended attempts, so
the reconciler leaves them alone, and an ended attempt still takes metrics within its token's
grace). Two load-generator processes hold 50 `IngestService.Report` streams each (real gRPC,
each with its run token) and send what the capsule's sender sends for a run that reports fast: records
of 1,000 points (the runner's coalescing limit: 10 metrics x 100 steps, in columns, as
`Reporter.metrics` writes them), 10 records per batch (180 KB), at most 2 batches (20,000 points) in
flight per stream, about the 10,000 points in flight per stream of the sender's window of 1,024
records of 10 points. A point counts once the server acknowledged its record (acks follow the
commit). The stored point count is checked at the end.

Peer: a local MLflow tracking server (`mlflow server`, SQLite backend store, its default workers),
100 runs logging with `MlflowClient.log_batch` (1000 metrics per call, MLflow's maximum) from the
same 2 x 50 client layout.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import pathlib
import sqlite3
import time
from typing import Any

from google.protobuf import timestamp_pb2
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc

from bench.common import (
    CONSOLE_CPUS,
    LOADGEN_CPUS,
    PEER_NOT_RUN,
    QUICK,
    Result,
    cpu_seconds,
    fresh_dir,
    loadavg,
    log,
    pin_this_process,
    pinning,
    ratio_higher_better,
    run_peer,
    skip_peer,
)
from bench.console import running_console
from common.channel import aio_channel, bearer

RUNS = 100
PROCS = 2
METRICS = 10
STEPS_PER_RECORD = 100
POINTS_PER_RECORD = METRICS * STEPS_PER_RECORD
RECORDS_PER_BATCH = 10
WINDOW_RECORDS = 2 * RECORDS_PER_BATCH
WARMUP_S = 1.0 if QUICK else 2.0
MEASURE_S = 3.0 if QUICK else 10.0


def make_runs(state_dir: pathlib.Path, owner: str, n: int) -> list[tuple[str, str]]:
    """(attempt_id, run token) of `n` runs, written as admission + dispatch write them, in the
    ledger of the console that will run in `state_dir` (whose admin token is written as `sf up` does)."""
    from common import ids
    from control import auth
    from control.db import migrate
    from control.db import models as m
    from control.db.engine import Database
    from control.ledger import state_machine as sm

    db = Database(f"sqlite:///{state_dir / 'ledger.db'}")
    migrate.upgrade(db.engine)

    def create(s: Any) -> list[tuple[str, str]]:
        auth.create_user(s, owner, admin=True)
        admin, _ = auth.issue_token(s, owner, "pat", name="bootstrap")
        (state_dir / "admin-token").write_text(admin + "\n")
        now = time.time()
        out = []
        for _ in range(n):
            job_id = ids.new_job_id()
            s.add(
                m.Job(
                    id=job_id, owner=owner, project=f"@{owner}/lab", experiment="exp", method="custom/custom",
                    state=sm.SUCCEEDED, spec=b"", pools=b"", created_at=now, updated_at=now, attempts_count=1,
                )
            )  # fmt: skip
            attempt_id = ids.attempt_id(job_id, 1)
            s.add(
                m.Attempt(
                    id=attempt_id, job_id=job_id, number=1, state=sm.SUCCEEDED, fleet="local",
                    created_at=now, ended_at=now, cleaned_at=now,
                )
            )  # fmt: skip
            token = auth.issue_run_token(s, owner, job_id, attempt_id)
            out.append((attempt_id, token))
        return out

    try:
        return db.run_sync(create)
    finally:
        db.close()


NAMES = [f"train/metric_{k}" for k in range(METRICS)]


def _batch(attempt_id: str, first_seq: int, stamp: timestamp_pb2.Timestamp) -> pb.ReportRequest:
    req = pb.ReportRequest(attempt_id=attempt_id)
    now = stamp.seconds + stamp.nanos / 1e9
    times = [now + i * 1e-4 for i in range(STEPS_PER_RECORD)]  # each step reported at its own time
    for i in range(RECORDS_PER_BATCH):
        seq = first_seq + i
        rec = req.records.add(seq=seq)
        rec.time.CopyFrom(stamp)
        first_step = (seq - 1) * STEPS_PER_RECORD
        steps = range(first_step, first_step + STEPS_PER_RECORD)
        values = [st * 0.001 for st in steps]
        for name in NAMES:
            rec.metrics.columns.add(name=name, steps=steps, values=values, times=times)
    return req


async def _stream(address: str, attempt_id: str, token: str, t_begin: float, t_end: float) -> int:
    """One run's Report stream; returns the points acknowledged inside [t_begin, t_end)."""
    channel = aio_channel(address)
    stub = pb_grpc.IngestServiceStub(channel)
    sent_seq = 0
    acked = 0
    counted = 0
    room = asyncio.Event()
    room.set()
    queue: asyncio.Queue[pb.ReportRequest | None] = asyncio.Queue()

    async def requests() -> Any:
        while True:
            item = await queue.get()
            if item is None:
                return
            yield item

    async def producer() -> None:
        nonlocal sent_seq
        stamp = timestamp_pb2.Timestamp()
        while time.monotonic() < t_end:
            if sent_seq - acked + RECORDS_PER_BATCH > WINDOW_RECORDS:
                room.clear()
                await room.wait()
                continue
            stamp.FromNanoseconds(time.time_ns())
            await queue.put(_batch(attempt_id, sent_seq + 1, stamp))
            sent_seq += RECORDS_PER_BATCH
        await queue.put(None)

    call = stub.Report(requests(), metadata=bearer(token))
    prod = asyncio.create_task(producer())
    try:
        async for resp in call:
            now = time.monotonic()
            if t_begin <= now < t_end:
                counted += (resp.acked_seq - acked) * POINTS_PER_RECORD
            acked = resp.acked_seq
            room.set()
            if now >= t_end:
                break  # what is still in flight is not counted
    finally:
        prod.cancel()
        call.cancel()
        await channel.close(None)
    return counted


def _loadgen(address: str, runs: list[tuple[str, str]], t_begin: float, t_end: float, out: Any) -> None:
    pin_this_process(LOADGEN_CPUS)  # before gRPC starts its threads

    async def go() -> int:
        counts = await asyncio.gather(*(_stream(address, a, t, t_begin, t_end) for a, t in runs))
        return sum(counts)

    out.put(asyncio.run(go()))


def _drive(address: str, runs: list[tuple[str, str]], server_pid: int) -> tuple[int, float, float]:
    """Run the load generators against `address`; the points acknowledged in the window, the load
    average before and the CPU seconds process `server_pid` spent in the window."""
    load = loadavg()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start = time.monotonic() + 3.0  # time for the workers to import and connect
    t_begin, t_end = start + WARMUP_S, start + WARMUP_S + MEASURE_S
    per = RUNS // PROCS
    procs = [
        ctx.Process(target=_loadgen, args=(address, runs[i * per : (i + 1) * per], t_begin, t_end, queue))
        for i in range(PROCS)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, t_begin - time.monotonic()))
    cpu0 = cpu_seconds(server_pid)
    time.sleep(max(0.0, t_end - time.monotonic()))
    cpu = cpu_seconds(server_pid) - cpu0
    total = sum(queue.get(timeout=MEASURE_S + 120) for _ in procs)
    for p in procs:
        p.join(30)
    return total, load[0], cpu


def measure_ours() -> dict[str, Any]:
    work = fresh_dir("ingest")
    state = work / "console"
    state.mkdir()
    runs = make_runs(state, "root", RUNS)
    with running_console(state) as console:
        total, load, cpu = _drive(console.address, runs, console.proc.pid)
        memory = console.memory()
    with sqlite3.connect(state / "ledger.db") as conn:
        stored = conn.execute("SELECT coalesce(sum(points), 0) FROM metric_chunks").fetchone()[0]
    return {
        "per_s": total / MEASURE_S,
        "points_in_window": total,
        "stored_rows": stored,
        "load_before": load,
        **_cpu_figures(cpu, total),
        **memory,
        **pinning(),
    }


def _cpu_figures(cpu_s: float, points: int) -> dict[str, float]:
    """The server's CPU in the window: cores used, and microseconds per 1,000 points acknowledged
    (on a shared machine this moves less than the rate)."""
    return {
        "server_cpu_share": cpu_s / MEASURE_S,
        "server_cpu_us_per_1k_points": cpu_s * 1e9 / points if points else float("nan"),
    }


def _floor_server(ports: Any) -> None:
    """An IngestService that parses each ReportRequest (grpc's own deserializer) and acknowledges
    its last record at once: no authentication, no storage, one event loop."""
    import grpc

    pin_this_process(CONSOLE_CPUS)

    class Floor(pb_grpc.IngestServiceServicer):
        async def Report(self, request_iterator: Any, context: Any) -> Any:
            async for req in request_iterator:
                yield pb.ReportResponse(acked_seq=req.records[-1].seq if req.records else 0)

    async def serve() -> None:
        server = grpc.aio.server()
        pb_grpc.add_IngestServiceServicer_to_server(Floor(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ports.put(port)
        await server.wait_for_termination()

    asyncio.run(serve())


def measure_floor() -> dict[str, Any]:
    """The same load against a server that only decodes and acknowledges: what this machine's two
    cores allow the transport, the decoding and the load generators themselves."""
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_floor_server, args=(ports,), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=60)
        runs = [(f"jfloor{i:04d}.1", "none") for i in range(RUNS)]
        assert server.pid is not None
        total, load, cpu = _drive(f"127.0.0.1:{port}", runs, server.pid)
    finally:
        server.terminate()  # our own child, by its handle
        server.join(10)
    return {
        "per_s": total / MEASURE_S,
        "points_in_window": total,
        "load_before": load,
        **_cpu_figures(cpu, total),
        **pinning(),
    }


def run() -> list[Result]:
    peer: dict[str, Any] = {"per_s": None}
    if not skip_peer("ingest"):
        log("ingest: MLflow peer")
        work = fresh_dir("mlflow")
        peer = run_peer(
            "mlflow_peer.py",
            ["--work", str(work), "--runs", str(RUNS), "--procs", str(PROCS), "--seconds", str(MEASURE_S)],
            timeout=600,
        )
        log(f"ingest: MLflow {peer['per_s']:.0f} points/s; ours")
    ours = measure_ours()
    log(f"ingest: ours {ours['per_s']:.0f} points/s; floor (decode and acknowledge only)")
    floor = measure_floor()
    log(f"ingest: floor {floor['per_s']:.0f} points/s")
    ratio = ratio_higher_better(ours["per_s"], peer["per_s"])
    return [
        Result(
            name="ingest",
            metric="metric points stored/s, 100 concurrent runs (SQLite)",
            figure=ours["per_s"],
            unit="points/s",
            peer=f"MLflow {peer.get('mlflow_version', '')} tracking server log_batch (SQLite store)"
            if peer["per_s"] is not None
            else PEER_NOT_RUN,
            peer_figure=peer["per_s"],
            ratio=ratio,
            ratio_note="ours / MLflow",
            target=">= 1,000,000/s and >= 100x MLflow",
            met=ours["per_s"] >= 1_000_000 and (ratio or 0) >= 100,
            command="python -m bench ingest",
            details={"ours": ours, "mlflow": peer, "floor": floor},
        )
    ]


if __name__ == "__main__":
    import sys

    print(json.dumps(measure_floor() if sys.argv[1:] == ["floor"] else measure_ours()))
