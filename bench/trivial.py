"""Trivial jobs on a warm embedded console, one after another: the measurements behind the
`submit` (submit -> RUNNING) and `capsule` (process start -> first instruction of train.sh) rows.

Each job's train.sh records bash's $EPOCHREALTIME as its first instruction, then sleeps 1 s (so
RUNNING is a state one can observe, the same for the Ray peer). "Container start" is the executor's
own record of the moment it spawned `sh bootstrap.sh` (attempt.json `created_at`, written right
before the process runtime's Popen), so the capsule figure includes the spawn itself.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from bench.common import QUICK, fresh_dir, log
from bench.console import Client, Console, running_console

TRAIN_SH = """#!/usr/bin/env bash
echo "$EPOCHREALTIME" > "$FORGE_OUT_DIR/first-instruction"
sleep 1
"""
WARMUP = 2
RUNS = 6 if QUICK else 20
PAST_RUNNING = {st.JOB_STATE_RUNNING, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED}
TERMINAL = {st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED}


@dataclass
class TrivialRuns:
    submit_to_running: list[float] = field(default_factory=list)
    capsule_start: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)  # server-side, from the job's events
    bare_start: list[float] = field(default_factory=list)  # floor: `bash train.sh` spawned directly
    console_memory: dict[str, float] = field(default_factory=dict)


_cache: list[TrivialRuns] = []


def _ts(t: Any) -> float:
    return float(t.seconds + t.nanos / 1e9)


async def _one(client: Client, console: Console, spec: Any, out: TrivialRuns | None) -> None:
    t0 = time.time()
    job = await client.submit(spec)
    running_at = None
    events: dict[int, float] = {}
    async with asyncio.timeout(120):
        async for r in client.control.WatchJob(ctl.WatchJobRequest(job_id=job.job_id), metadata=client.md):
            events.setdefault(r.event.to_state, _ts(r.event.time))
            if running_at is None and r.event.to_state in PAST_RUNNING:
                running_at = time.time()
            if r.job.state in TERMINAL:
                break
    final = await client.get(job.job_id)
    if final.state != st.JOB_STATE_SUCCEEDED:
        raise RuntimeError(f"trivial job {job.job_id} ended {st.JobState.Name(final.state)}")
    if out is None or running_at is None:
        return
    out.submit_to_running.append(running_at - t0)
    order = [st.JOB_STATE_QUEUED, st.JOB_STATE_SUBMITTED, st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING]
    for a, b in itertools.pairwise(order):
        if a in events and b in events:
            key = f"{st.JobState.Name(a).removeprefix('JOB_STATE_')}->{st.JobState.Name(b).removeprefix('JOB_STATE_')}"
            out.stages.setdefault(key, []).append(events[b] - events[a])
    attempt = final.attempts[-1]
    record = json.loads((console.state_dir / "executor" / "attempts" / attempt.attempt_id / "attempt.json").read_text())
    first = float((pathlib.Path(record["out_dir"]) / "first-instruction").read_text().strip())
    out.capsule_start.append(first - float(record["created_at"]))


def _bare_floor(work: pathlib.Path, n: int) -> list[float]:
    """`bash train.sh` started directly with Popen: the floor any launcher pays."""
    script = work / "bare-train.sh"
    script.write_text(TRAIN_SH.replace("sleep 1", "true"))
    out = []
    for _ in range(n):
        t0 = time.time()
        subprocess.run(["bash", str(script)], env={"FORGE_OUT_DIR": str(work), "PATH": "/usr/bin:/bin"}, check=True)
        out.append(float((work / "first-instruction").read_text()) - t0)
    return out


async def _measure(console: Console) -> TrivialRuns:
    client = Client(console)
    try:
        spec = await client.custom_spec(TRAIN_SH)
        for _ in range(WARMUP):
            await _one(client, console, spec, None)
        runs = TrivialRuns()
        for i in range(RUNS):
            await _one(client, console, spec, runs)
            log(f"trivial job {i + 1}/{RUNS}: submit->RUNNING {runs.submit_to_running[-1] * 1000:.0f} ms")
        runs.console_memory = console.memory()
        return runs
    finally:
        await client.close()


def trivial_runs() -> TrivialRuns:
    """Measured once per process (the submit and capsule rows share the jobs)."""
    if not _cache:
        work = fresh_dir("trivial")
        with running_console(work / "console") as console:
            runs = asyncio.run(_measure(console))
        runs.bare_start = _bare_floor(work, RUNS)
        _cache.append(runs)
    return _cache[0]
