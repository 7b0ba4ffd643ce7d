"""Many followers: 10,000 concurrent `StreamJobLogs` follow streams over 100 reporting jobs; the
control plane's RSS and CPU, and the latency of a line from its print time to a follower.

Ours: the real embedded console (its own process, SQLite ledger). 100 jobs are RUNNING in the
ledger as dispatch leaves them (job row, RUNNING attempt, run token scoped to the attempt), on a
fleet this console does not serve, so the reconciler leaves them alone: their lines come only
through the real ingest path. One reporter process holds the 100 `IngestService.Report` streams,
as the capsule's sender does, on the console's ingest port (`ingest_listen`, as a console that
serves many followers is configured; docs/configuration.md), and every INTERVAL_S sends each run
one log record of one line, `tick <i> <time.time()>`. Two follower processes hold 5,000 `StreamJobLogs(follow=True,
tail_lines=1)` streams each (what `sf job logs -f` and the web console open), 100 per channel,
spread evenly over the runs (100 followers per run). Each line received is stamped on arrival;
latency is arrival minus the time printed in it (same clock, same machine), for lines printed in
the measuring window. Once every follower has received a line, the window starts; the console's
RSS and CPU are sampled every second through it. When not every follower has a line after
CONNECT_S, the window starts with those that have (the others keep trying): the row's name then
says how many were connected, and it is not met.

The load generators run on the same cores as the console, so their own lag is in the latency;
they run with the garbage collector's serving settings (`common.gc_tuning`), as the servers do:
with CPython's defaults, the full collections of 5,000 streams' objects took each of them about a
tenth of a core.
A follower whose stream breaks resumes after its last line with `sf job logs -f`'s backoff.
Peer (a floor): `bench.followers_floor`, a bare grpc.aio server in its own process that answers the
same method for the same follower processes and only sends each stream one message per line printed:
what Python gRPC alone costs on this machine for the row's streams. (Ray's tail_job_logs is one HTTP
stream per follower against the job's log file; its single-follower latency is in the log-follow row.)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pathlib
import random
import time
from typing import Any

from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from starforge_api.job.v1 import telemetry_pb2

from bench.common import QUICK, Result, env_float, env_int, fresh_dir, loadavg, log, rss_mib, summary
from bench.console import running_console
from bench.throughput import cpu_seconds
from common.channel import aio_channel, bearer
from common.gc_tuning import tune_for_serving

RUNS = 10 if QUICK else 100
FOLLOWERS = 200 if QUICK else env_int("STARFORGE_BENCH_FOLLOWERS", 10000, minimum=1)
FOLLOWER_PROCS = 1 if QUICK else 2
STREAMS_PER_CHANNEL = 100
INTERVAL_S = 1.0
BACKOFF_INITIAL_S, BACKOFF_CEILING_S = 0.5, 5.0  # cli.follow.Backoff's
MEASURE_S = 5.0 if QUICK else 30.0
# How long the followers have to all get a line. A console that cannot hold them all (on a small
# machine grpc.aio accepts new calls only between the turns of a loop busy with the streams it
# already has) is measured with those that did connect: the row says how many, and is not met.
CONNECT_S = env_float("STARFORGE_BENCH_FOLLOWERS_CONNECT_S", 60.0 if QUICK else 240.0, minimum=1.0)
FLEET = "bench-elsewhere"  # not configured on the console: the reconciler leaves these attempts alone


def make_running(state_dir: pathlib.Path, owner: str, n: int) -> list[tuple[str, str, str]]:
    """(job_id, attempt_id, run token) of `n` RUNNING jobs in the ledger of the console that will run in
    `state_dir` (whose admin token is written as `sf up` does)."""
    from common import ids
    from control import auth
    from control.db import migrate
    from control.db import models as m
    from control.db.engine import Database
    from control.ledger import state_machine as sm

    db = Database(f"sqlite:///{state_dir / 'ledger.db'}")
    migrate.upgrade(db.engine)

    def create(s: Any) -> list[tuple[str, str, str]]:
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
                    state=sm.RUNNING, spec=b"", pools=b"", created_at=now, updated_at=now, attempts_count=1,
                    fleet=FLEET,
                )
            )  # fmt: skip
            attempt_id = ids.attempt_id(job_id, 1)
            s.add(m.Attempt(id=attempt_id, job_id=job_id, number=1, state=sm.RUNNING, fleet=FLEET, created_at=now))
            out.append((job_id, attempt_id, auth.issue_run_token(s, owner, job_id, attempt_id)))
        return out

    try:
        return db.run_sync(create)
    finally:
        db.close()


async def _report(address: str, attempt_id: str, token: str, stop_at: float, errors: list[str]) -> int:
    """One run's Report stream: a line every INTERVAL_S; on a broken stream it resumes after the
    server's cursor (as the capsule's sender does)."""
    channel = aio_channel(address)
    stub = pb_grpc.IngestServiceStub(channel)
    sent = 0
    seq = 0

    async def requests() -> Any:
        nonlocal sent, seq
        while time.time() < stop_at:
            req = pb.ReportRequest(attempt_id=attempt_id)
            rec = req.records.add(seq=seq + 1)
            rec.time.GetCurrentTime()
            rec.log_chunk.stream = telemetry_pb2.LOG_STREAM_STDOUT
            rec.log_chunk.lines.append(f"tick {seq + 1} {time.time():.6f}")
            seq += 1
            sent += 1
            yield req
            await asyncio.sleep(INTERVAL_S)

    try:
        while time.time() < stop_at:
            try:
                cursor = await stub.GetCursor(pb.GetCursorRequest(attempt_id=attempt_id), metadata=bearer(token))
                seq = cursor.acked_seq
                async for _ in stub.Report(requests(), metadata=bearer(token)):
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                await asyncio.sleep(0.5)
    finally:
        await channel.close(None)
    return sent


def _reporter(address: str, runs: list[tuple[str, str, str]], stop_at: float, out: Any) -> None:
    async def go() -> int:
        # spread the runs' ticks over the interval, as independent jobs would print
        errors: list[str] = []

        async def one(i: int, attempt_id: str, token: str) -> int:
            await asyncio.sleep(INTERVAL_S * i / len(runs))
            return await _report(address, attempt_id, token, stop_at, errors)

        async def tell() -> None:
            while True:
                await asyncio.sleep(10)
                if errors:
                    log(f"followers: reporter stream errors so far {len(errors)}, last: {errors[-1]}")

        teller = asyncio.ensure_future(tell())
        try:
            return sum(await asyncio.gather(*(one(i, a, t) for i, (_, a, t) in enumerate(runs))))
        finally:
            teller.cancel()

    out.put(("sent", asyncio.run(go())))


def _followers(k: int, address: str, token: str, job_ids: list[str], window: Any, out: Any) -> None:
    """`len(job_ids)` follow streams; reports how many have a line, then the window's latencies."""

    async def go() -> None:
        n_channels = (len(job_ids) + STREAMS_PER_CHANNEL - 1) // STREAMS_PER_CHANNEL
        channels = [aio_channel(address) for _ in range(n_channels)]
        stubs = [ctl_grpc.ControlServiceStub(ch) for ch in channels]
        md = bearer(token)
        latencies: list[float] = []
        have_line = [False] * len(job_ids)
        errors: list[str] = []

        async def follow(i: int, job_id: str) -> None:
            """Follows, resuming after the last line on a broken stream with `sf job logs -f`'s
            backoff (cli.follow.Backoff: 0.5 s doubling up to 5 s; jittered here, as thousands of
            clients that broke together would be)."""
            cursor: tuple[int, int] | None = None
            delay = 0.0
            while True:
                req = ctl.StreamJobLogsRequest(job_id=job_id, follow=True, tail_lines=1)
                if cursor is not None:
                    req = ctl.StreamJobLogsRequest(
                        job_id=job_id, follow=True, after_attempt_number=cursor[0], after_offset=cursor[1]
                    )
                try:
                    async for r in stubs[i // STREAMS_PER_CHANNEL].StreamJobLogs(req, metadata=md):
                        now = time.time()
                        have_line[i] = True
                        delay = 0.0
                        begin, end = window[0], window[1] or float("inf")
                        for line in r.lines:
                            cursor = (line.attempt_number, line.offset)
                            parts = line.text.split()
                            if len(parts) == 3 and parts[0] == "tick":
                                printed = float(parts[2])
                                if begin and begin <= printed < end:
                                    latencies.append(now - printed)
                        if r.final_state:
                            return
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                    delay = min(BACKOFF_CEILING_S, max(BACKOFF_INITIAL_S, delay * 2))
                    await asyncio.sleep(delay * random.uniform(0.5, 1.5))

        tasks = [asyncio.ensure_future(follow(i, j)) for i, j in enumerate(job_ids)]
        while not all(have_line) and not window[1]:
            await asyncio.sleep(1.0)
            out.put(("ready", k, sum(have_line), len(errors), errors[-1:]))
        out.put(("ready", k, sum(have_line), len(errors), errors[-1:]))
        while not window[1] or time.time() < window[1] + 3.0:  # noqa: ASYNC110 (set by another process)
            await asyncio.sleep(0.2)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in channels:
            await ch.close(None)
        out.put(("done", latencies, [*errors[:5], f"{len(errors)} stream errors in all"]))

    tune_for_serving()
    asyncio.run(go())


def measure_ours() -> dict[str, Any]:
    work = fresh_dir("followers")
    state = work / "console"
    state.mkdir()
    runs = make_running(state, "root", RUNS)
    # the runs report on the ingest port (control/ingest_port.py), as a console serving many
    # followers is deployed (docs/configuration.md, `ingest_listen`)
    with running_console(state, extra_yaml="ingest_listen: 127.0.0.1:0\n") as console:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        stop_at = time.time() + 3600
        log(f"runs report to {console.ingest_address}")
        reporter = ctx.Process(target=_reporter, args=(console.ingest_address, runs, stop_at, queue))
        reporter.start()
        try:
            job_ids = [runs[i % RUNS][0] for i in range(FOLLOWERS)]
            return _measure(console.proc.pid, console.address, console.token, job_ids, ctx, queue)
        finally:
            reporter.kill()
            reporter.join(10)


def measure_floor() -> dict[str, Any]:
    """The same followers against `bench.followers_floor`'s bare server (no ledger, no ingest)."""
    from bench import followers_floor

    with followers_floor.running(RUNS, INTERVAL_S) as (pid, address, job_ids):
        ctx = multiprocessing.get_context("spawn")
        followed = [job_ids[i % RUNS] for i in range(FOLLOWERS)]
        return _measure(pid, address, "floor", followed, ctx, ctx.Queue())


def _measure(pid: int, address: str, token: str, job_ids: list[str], ctx: Any, queue: Any) -> dict[str, Any]:
    """FOLLOWERS streams over `job_ids` (in FOLLOWER_PROCS processes) against the server `pid` at
    `address`: the time until each has a line, then a MEASURE_S window's latencies, RSS and CPU."""
    load = loadavg()
    rss_idle = rss_mib(pid)["rss"]
    window = ctx.Array("d", [0.0, 0.0])
    per = (FOLLOWERS + FOLLOWER_PROCS - 1) // FOLLOWER_PROCS
    procs = [
        ctx.Process(target=_followers, args=(k, address, token, job_ids[k * per : (k + 1) * per], window, queue))
        for k in range(FOLLOWER_PROCS)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    ready = [0] * FOLLOWER_PROCS
    results: list[tuple[list[float], list[str]]] = []
    try:
        deadline = time.monotonic() + CONNECT_S
        said = time.monotonic()
        while sum(ready) < FOLLOWERS and time.monotonic() < deadline:
            kind, *rest = queue.get(timeout=CONNECT_S + 60)
            if kind == "ready":
                ready[rest[0]] = rest[1]
                if time.monotonic() - said > 10:
                    said = time.monotonic()
                    log(f"followers: {sum(ready)} of {FOLLOWERS} have a line; errors {rest[2]} {rest[3]}")
        connect_s = time.monotonic() - t0
        connected = sum(ready)
        if connected < FOLLOWERS:
            log(
                f"followers: only {connected} of {FOLLOWERS} streams have a line after {CONNECT_S:.0f} s; "
                f"measuring those (the others keep trying) for {MEASURE_S:.0f} s"
            )
        else:
            log(f"followers: {FOLLOWERS} streams have a line after {connect_s:.0f} s; measuring {MEASURE_S:.0f} s")
        cpu0, w0 = cpu_seconds(pid), time.monotonic()
        window[0] = time.time()
        samples = []
        while time.monotonic() - w0 < MEASURE_S:
            time.sleep(1.0)
            samples.append(rss_mib(pid)["rss"])
        cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - w0)
        window[1] = time.time()
        peak = rss_mib(pid)["hwm"]
        while len(results) < FOLLOWER_PROCS:
            kind, *rest = queue.get(timeout=120)
            if kind == "done":
                results.append((rest[0], rest[1]))
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    latencies = [x for lat, _ in results for x in lat]
    errors = [e for _, errs in results for e in errs]
    expected = connected * MEASURE_S / INTERVAL_S
    return {
        "runs": RUNS,
        "followers": FOLLOWERS,
        "connected": connected,
        "connect_s": connect_s,
        "latency": summary(latencies),
        "lines_received": len(latencies),
        "lines_expected_about": expected,
        "rss_mib_max": max(samples),
        "rss_mib_mean": sum(samples) / len(samples),
        "rss_mib_idle": rss_idle,
        "rss_mib_peak": peak,
        "cpu_cores": cpu,
        "errors": errors,
        "load_before": load[0],
    }


def _over(ours: float, floor: float) -> float | None:
    """ours / floor (how far above what gRPC alone costs), None without a floor figure."""
    return ours / floor if floor else None


def run() -> list[Result]:
    ours = measure_ours()
    lat = ours["latency"]
    log(
        f"followers: RSS max {ours['rss_mib_max']:.0f} MiB, CPU {ours['cpu_cores']:.2f} cores, "
        f"p99 {lat['p99'] * 1000:.0f} ms over {ours['lines_received']} lines"
    )
    if ours["lines_received"] < 0.5 * ours["lines_expected_about"]:
        got, want = ours["lines_received"], ours["lines_expected_about"]
        raise RuntimeError(f"followers received {got} lines, about {want:.0f} expected")
    floor = measure_floor()
    flat = floor["latency"]
    log(
        f"followers floor: RSS max {floor['rss_mib_max']:.0f} MiB, CPU {floor['cpu_cores']:.2f} cores, "
        f"p99 {flat['p99'] * 1000:.0f} ms over {floor['lines_received']} lines, connect {floor['connect_s']:.0f} s"
    )
    load = f"{FOLLOWERS:,} follow streams over {RUNS} reporting runs (1 line/s each)"
    held = ours["connected"] == FOLLOWERS
    if not held:  # said in the row itself: a figure over fewer streams is not the row's load
        load += f", only {ours['connected']:,} of them connected"
    floor_name = "floor: bare grpc.aio server, the same followers, one message per line, no ledger"
    if floor["connected"] < FOLLOWERS:
        floor_name += f" ({floor['connected']:,} of {FOLLOWERS:,} connected)"
    details = {"ours": ours, "floor": floor}
    return [
        Result(
            name="followers-latency",
            metric=f"printed line -> follower, {load}, p99",
            figure=lat["p99"],
            unit="s",
            peer=f"{floor_name}, p99",
            peer_figure=flat["p99"],
            ratio=_over(lat["p99"], flat["p99"]),
            ratio_note="ours / floor, lower is better",
            target="p99 <= 0.200 s",
            met=held and lat["p99"] <= 0.2,
            command="python -m bench followers",
            details=details,
        ),
        Result(
            name="followers-memory",
            metric=f"control plane RSS, {load}, max",
            figure=ours["rss_mib_max"],
            unit="MiB",
            peer=f"{floor_name}, RSS max",
            peer_figure=floor["rss_mib_max"],
            ratio=_over(ours["rss_mib_max"], floor["rss_mib_max"]),
            ratio_note="ours / floor, lower is better",
            target="<= 1024 MiB",
            met=held and ours["rss_mib_max"] <= 1024,
            command="python -m bench followers",
            details={"cpu_cores": ours["cpu_cores"], "floor_cpu_cores": floor["cpu_cores"]},
        ),
        Result(
            name="followers-cpu",
            metric=f"control plane CPU, {load}",
            figure=ours["cpu_cores"],
            unit="cores",
            peer=f"{floor_name}, CPU",
            peer_figure=floor["cpu_cores"],
            ratio=_over(ours["cpu_cores"], floor["cpu_cores"]),
            ratio_note="ours / floor, lower is better",
            target="(reported)",
            met=None,
            command="python -m bench followers",
            details={},
        ),
    ]
