"""Soak: many `sf job logs -f` followers and many reporting runs on one console, for minutes.

The console is a real control plane process (its RSS is what is measured) with the local executor
(process runtime). RUNS jobs each print a line carrying its print time, and report a metric, every
INTERVAL seconds until the test tells them to stop. FOLLOWERS log followers (what `sf job logs -f`
does: StreamJobLogs with follow, resuming after its cursor on a broken stream) spread evenly over
the runs; they are grpc.aio streams in this process, over 20 channels, not 1,000 `sf` processes
(1,000 Python interpreters would measure this machine, not the console).

Every SAMPLE seconds the test records the control plane's RSS and the latency of every line
received since the last sample (receive time minus the time printed in the line). Once every run
is RUNNING and every follower has received a line, the measured window starts; it lasts
SF_SOAK_SECONDS. Then:

- memory stays flat: the mean RSS of the window's last quarter is within 20% of its second
  quarter's (the first quarter is warm-up: caches, the allocator);
- latency holds: the last quarter's p99 is at most 1.5x the second quarter's plus 0.5 s, and the
  window's p99 stays under 5 s;
- every follower received every line of its run exactly once, in order.

Parameters (environment): SF_SOAK_SECONDS (600), SF_SOAK_RUNS (100), SF_SOAK_FOLLOWERS (1000),
SF_SOAK_INTERVAL (1.0 s between lines of a run), SF_SOAK_SAMPLE (5 s). The figures go to
test-artifacts/soak/soak.json and are printed; docs/reliability.md holds the last run's.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from tests.integration.console import Console
from tests.reliability.harness import REPO, ControlProcess, ExecutorProcess, rss_bytes, submit_many, until

SECONDS = float(os.environ.get("SF_SOAK_SECONDS", "600"))
RUNS = int(os.environ.get("SF_SOAK_RUNS", "100"))
FOLLOWERS = int(os.environ.get("SF_SOAK_FOLLOWERS", "1000"))
INTERVAL = float(os.environ.get("SF_SOAK_INTERVAL", "1.0"))
SAMPLE = float(os.environ.get("SF_SOAK_SAMPLE", "5"))
CHANNELS = 20
ARTIFACTS = REPO / "test-artifacts" / "soak"


def train_sh(stop_file: pathlib.Path) -> str:
    return f"""#!/usr/bin/env bash
python3 - <<'PY'
import os, time, starforge
i = 0
while not os.path.exists({str(stop_file)!r}):
    i += 1
    now = time.time()
    starforge.report(step=i, loss=1.0 / i)
    print(f"tick {{i}} {{now:.6f}}", flush=True)
    time.sleep({INTERVAL})
PY
"""


@dataclass
class Follower:
    job_id: str
    lines: list[int] = field(default_factory=list)
    reconnects: int = 0
    final: int = 0


@dataclass
class Sample:
    at: float
    rss: int
    latencies: list[float]
    received: int
    cpu: float  # the control plane's CPU use since the last sample, in cores


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Soak:
    def __init__(self, address: str, token: str) -> None:
        self.channels = [aio_channel(address) for _ in range(CHANNELS)]
        self.md = bearer(token)
        self.latencies: list[float] = []
        self.received = 0
        self.errors: list[str] = []

    async def follow(self, f: Follower, stub: ctl_grpc.ControlServiceStub) -> None:
        """From the run's first line (exactly-once check); latency counts lines printed after it started."""
        started = time.time()
        cursor: tuple[int, int] | None = None
        while not f.final:
            req = ctl.StreamJobLogsRequest(job_id=f.job_id, follow=True)
            if cursor is not None:
                req.after_attempt_number, req.after_offset = cursor
            try:
                async for r in stub.StreamJobLogs(req, metadata=self.md):
                    now = time.time()
                    for line in r.lines:
                        cursor = (line.attempt_number, line.offset)
                        parts = line.text.split()
                        if len(parts) == 3 and parts[0] == "tick":
                            f.lines.append(int(parts[1]))
                            self.received += 1
                            if float(parts[2]) >= started:
                                self.latencies.append(now - float(parts[2]))
                    if r.final_state:
                        f.final = r.final_state
            except grpc.aio.AioRpcError as e:
                f.reconnects += 1
                if len(self.errors) < 20:
                    self.errors.append(f"{e.code().name}: {e.details()}")
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        for ch in self.channels:
            await ch.close(None)


def _p(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _quarter(samples: list[Sample], k: int) -> list[Sample]:
    n = len(samples)
    return samples[k * n // 4 : (k + 1) * n // 4]


@pytest.mark.soak
@pytest.mark.timeout(int(SECONDS) + 1800)
async def test_soak_followers_and_reporting_runs_memory_flat_latency_holds(tmp_path: pathlib.Path) -> None:
    stop_file = tmp_path / "stop"
    executor = ExecutorProcess(tmp_path, slots=RUNS + 8)
    executor.start()
    control = ControlProcess(
        tmp_path, executor.address, slots=RUNS + 8, scheduler_interval_seconds=0.2, reconcile_interval_seconds=2.0
    )
    control.start()
    soak = Soak(control.address, control.token)
    followers: list[Follower] = []
    tasks: list[asyncio.Task[None]] = []
    samples: list[Sample] = []
    try:
        c = Console(
            app=None,  # type: ignore[arg-type]
            token=control.token,
            root=tmp_path,
            executor=None,
            executor_address="",
            channel=soak.channels[0],
        )
        job_ids = await submit_many(c, RUNS, train_sh(stop_file))

        async def all_running() -> bool:
            r = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=1000), metadata=c.md, timeout=30)
            bad = [j for j in r.jobs if j.state in (st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)]
            assert not bad, [(j.job_id, j.diagnosis.summary) for j in bad[:5]]
            running: int = sum(j.state == st.JOB_STATE_RUNNING for j in r.jobs)
            return running == RUNS

        await until(all_running, timeout=600, what=f"{RUNS} runs to be RUNNING")
        followers = [Follower(job_ids[i % RUNS]) for i in range(FOLLOWERS)]
        stubs = [ctl_grpc.ControlServiceStub(ch) for ch in soak.channels]
        tasks = [asyncio.ensure_future(soak.follow(f, stubs[i % CHANNELS])) for i, f in enumerate(followers)]
        assert control.proc is not None

        async def every_follower_has_lines() -> bool:
            return all(f.lines for f in followers)

        await until(every_follower_has_lines, timeout=600, what="every follower's first line")  # warm-up done
        start = time.monotonic()
        seen = len(soak.latencies)
        cpu = cpu_seconds(control.proc.pid)
        while time.monotonic() - start < SECONDS:
            await asyncio.sleep(SAMPLE)
            lat = soak.latencies[seen:]
            seen = len(soak.latencies)
            cpu, used = cpu_seconds(control.proc.pid), cpu_seconds(control.proc.pid) - cpu
            samples.append(
                Sample(time.monotonic() - start, rss_bytes(control.proc.pid), lat, soak.received, used / SAMPLE)
            )
            print(
                f"soak t={samples[-1].at:6.0f}s rss={samples[-1].rss / 2**20:7.1f} MiB lines={len(lat):6d} "
                f"cpu={samples[-1].cpu:4.2f} reconnects={sum(f.reconnects for f in followers)} "
                f"p50={_p(lat, 0.5) * 1000:7.1f} ms p99={_p(lat, 0.99) * 1000:7.1f} ms",
                flush=True,
            )
        stop_file.touch()  # the runs end; their followers get the final state and return
        await asyncio.wait_for(asyncio.gather(*tasks), 600)
    finally:
        stop_file.touch()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        r = None
        try:
            r = await ctl_grpc.ControlServiceStub(soak.channels[0]).ListJobs(
                ctl.ListJobsRequest(page_size=1000), metadata=soak.md, timeout=30
            )
        finally:
            await soak.close()
            control.stop()
            executor.stop()
    figures = _figures(samples)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "soak.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps({k: v for k, v in figures.items() if k != "samples"}, indent=1))

    assert r is not None and all(j.state == st.JOB_STATE_SUCCEEDED for j in r.jobs), [
        (j.job_id, j.diagnosis.summary) for j in r.jobs if j.state != st.JOB_STATE_SUCCEEDED
    ][:5]
    # exactly once, in order, for every follower of every run
    for f in followers:
        assert f.final == st.JOB_STATE_SUCCEEDED and f.lines == list(range(1, len(f.lines) + 1)), (
            f.job_id,
            f.lines[:5],
            f.final,
        )
    by_job: dict[str, set[int]] = {}
    for f in followers:
        by_job.setdefault(f.job_id, set()).add(len(f.lines))
    assert all(len(v) == 1 for v in by_job.values()), "followers of one run saw different line counts"
    # memory flat, latency holds
    q2, q4 = figures["quarters"][1], figures["quarters"][3]
    assert q4["rss_mean_mib"] <= 1.2 * q2["rss_mean_mib"], figures["quarters"]
    assert q4["p99_ms"] <= 1.5 * q2["p99_ms"] + 500, figures["quarters"]
    assert figures["p99_ms"] < 5000, figures


def _figures(samples: list[Sample]) -> dict[str, Any]:
    all_lat = [x for s in samples for x in s.latencies]
    quarters = []
    for k in range(4):
        part = _quarter(samples, k)
        lat = [x for s in part for x in s.latencies]
        quarters.append(
            {
                "from_s": round(part[0].at - SAMPLE, 1) if part else 0,
                "to_s": round(part[-1].at, 1) if part else 0,
                "rss_mean_mib": round(statistics.mean(s.rss for s in part) / 2**20, 1) if part else 0,
                "control_cpu_cores": round(statistics.mean(s.cpu for s in part), 2) if part else 0,
                "lines": len(lat),
                "p50_ms": round(_p(lat, 0.5) * 1000, 1),
                "p99_ms": round(_p(lat, 0.99) * 1000, 1),
            }
        )
    return {
        "seconds": SECONDS,
        "runs": RUNS,
        "followers": FOLLOWERS,
        "interval_s": INTERVAL,
        "lines_received": len(all_lat),
        "p50_ms": round(_p(all_lat, 0.5) * 1000, 1),
        "p99_ms": round(_p(all_lat, 0.99) * 1000, 1),
        "max_ms": round(max(all_lat, default=0) * 1000, 1),
        "quarters": quarters,
        "samples": [
            {
                "t_s": round(s.at, 1),
                "rss_mib": round(s.rss / 2**20, 1),
                "control_cpu_cores": round(s.cpu, 2),
                "lines": len(s.latencies),
                "p50_ms": round(_p(s.latencies, 0.5) * 1000, 1),
                "p99_ms": round(_p(s.latencies, 0.99) * 1000, 1),
            }
            for s in samples
        ],
    }
