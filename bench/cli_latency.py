"""CLI latency: wall time of `sf job ls` and `sf job status <id>` against a warm console.

Ours: the real `sf` console script of this environment (a new process each time, as a user's shell
starts it), text output, against a warm embedded console (`sf up`, its own process) holding 20
queued jobs of the user (fleet drained); from process start to exit, one warm-up run, then RUNS
runs of each command. Floor, in the details: `python -c pass` with the same interpreter (what
any Python CLI pays before its first import). One run with `PYTHONPROFILEIMPORTTIME=1` gives the
import profile of `sf job ls` (details: `imports_ms`, the biggest top-level imports).

Peers: `squeue` of the project's Slurm 24.11 test cluster (tools/slurm; C, run inside the
cluster's namespaces with `nsenter … chroot`, whose own cost `nsenter … chroot true` is in the
details and included in the figure), with 20 held jobs queued; and `ray job list` / `ray job
status` against the Ray head of the same run (bench/peers_cache.py; Python, like ours).
STARFORGE_BENCH_QUICK=1 measures ours only (3 runs each), without starting either peer. The details
also hold each command's CPU time (`cpu`, user + system from getrusage), which a loaded machine
disturbs far less than the wall time, and `sf -o json job ls`.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import resource
import subprocess
import sys
import time
from typing import Any

from bench.common import PEER_NOT_RUN, QUICK, Result, fresh_dir, log, ratio_lower_better, skip_peer, summary
from bench.console import SF, Client, Console, running_console
from bench.trivial import TRAIN_SH

RUNS = 3 if QUICK else 10
JOBS = 20
TARGET_S = 0.150


def _timed(argv: list[str], env: dict[str, str] | None = None, cwd: pathlib.Path | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system, of the process and its children) of one run of `argv`.

    CPU comes from this process's RUSAGE_CHILDREN before and after: the runs are waited for one
    at a time, and the console (started earlier, still running) is never counted in it.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _series(argv: list[str], env: dict[str, str] | None = None, cwd: pathlib.Path | None = None) -> list[float]:
    """Wall times of RUNS runs after one warm-up (page cache, the console's first call on a new connection)."""
    return _wall_and_cpu(argv, env, cwd)[0]


def _wall_and_cpu(
    argv: list[str], env: dict[str, str] | None = None, cwd: pathlib.Path | None = None
) -> tuple[list[float], list[float]]:
    """Wall and CPU times of RUNS runs after one warm-up. On a shared machine the wall time moves
    with everyone else's load; the CPU time much less (docs/benchmarks.md, **cli**)."""
    _timed(argv, env, cwd)
    runs = [_timed(argv, env, cwd) for _ in range(RUNS)]
    return [w for w, _ in runs], [c for _, c in runs]


def _import_profile(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Top-level imports of one run by cumulative time (ms), biggest first (`-X importtime`)."""
    r = subprocess.run(argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, capture_output=True, text=True, check=True)
    top: dict[str, float] = {}
    for line in r.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):
            top[parts[2].strip()] = int(parts[1]) / 1000
    return dict(sorted(top.items(), key=lambda kv: -kv[1])[:10])


async def _queue_jobs(console: Console) -> str:
    client = Client(console)
    try:
        spec = await client.custom_spec(TRAIN_SH)
        await client.drain()
        job_id = ""
        for _ in range(JOBS):
            job_id = (await client.submit(spec)).job_id
        return job_id
    finally:
        await client.close()


def measure_ours() -> dict[str, Any]:
    work = fresh_dir("cli")
    with running_console(work / "console") as console:
        job_id = asyncio.run(_queue_jobs(console))
        env = console.env()
        ls, ls_cpu = _wall_and_cpu([str(SF), "job", "ls"], env, work)
        status, status_cpu = _wall_and_cpu([str(SF), "job", "status", job_id], env, work)
        ls_json, ls_json_cpu = _wall_and_cpu([str(SF), "-o", "json", "job", "ls"], env, work)
        version, version_cpu = _wall_and_cpu([str(SF), "--version"], env, work)
        imports = _import_profile([str(SF), "job", "ls"], env)
    python_start, python_start_cpu = _wall_and_cpu([sys.executable, "-c", "pass"])
    return {
        "job_ls": summary(ls),
        "job_status": summary(status),
        "job_ls_json": summary(ls_json),
        "version": summary(version),
        "python_start": summary(python_start),
        "cpu": {
            "job_ls": summary(ls_cpu),
            "job_status": summary(status_cpu),
            "job_ls_json": summary(ls_json_cpu),
            "version": summary(version_cpu),
            "python_start": summary(python_start_cpu),
        },
        "imports_ms": imports,
    }


def measure_squeue() -> dict[str, Any]:
    from executor_svc.slurm.client import SlurmClient
    from executor_svc.slurm.models import BatchJob
    from tools.slurm import cluster
    from tools.slurm.probes import CLEAN_ENV

    run_dir = fresh_dir("cli-slurm")
    info = cluster.start(run_dir, die_with_caller=True, log=lambda m: log(f"slurm: {m}"))
    try:
        job = BatchJob(
            name="sfbench",
            script="#!/bin/sh\ntrue\n",
            working_directory=info.staging_dir,
            partition=info.partition,
            extra={"hold": True},
        )

        async def submit() -> None:
            client = SlurmClient(info.restd_url, user=info.user, token=info.token)
            try:
                for _ in range(JOBS):
                    await client.submit(job)
            finally:
                await client.aclose()

        asyncio.run(submit())
        enter = ["nsenter", f"--target={info.pids['nsinit']}", "--mount", "--pid", "--", "chroot", info.chroot]
        env = dict(CLEAN_ENV)
        return {
            "squeue": summary(_series([*enter, "squeue"], env)),
            "nsenter_chroot_true": summary(_series([*enter, "true"], env)),
            "slurm_version": info.slurm_version,
        }
    finally:
        cluster.stop(run_dir)


def _peers() -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    if skip_peer("cli"):
        return None, None, PEER_NOT_RUN
    from bench.peers_cache import ray_results

    notes = []
    squeue = None
    try:
        squeue = measure_squeue()
    except Exception as exc:  # no chroot and no mirror to build it: the row still has Ray
        notes.append(f"squeue not measured: {type(exc).__name__}: {str(exc)[:300]}")
        log(f"cli: {notes[-1]}")
    ray = None
    try:
        ray = ray_results().get("cli")
    except Exception as exc:  # the row keeps its squeue peer
        notes.append(f"ray not measured: {type(exc).__name__}: {str(exc)[:300]}")
        log(f"cli: {notes[-1]}")
    ray_summary = {k: summary(v) for k, v in ray.items()} if ray else None
    return squeue, ray_summary, "; ".join(notes)


def run() -> list[Result]:
    squeue, ray, note = _peers()
    ours = measure_ours()
    ls, status = ours["job_ls"]["p50"], ours["job_status"]["p50"]
    cpu = ours["cpu"]
    log(
        f"cli: sf job ls p50 {ls * 1000:.0f} ms ({cpu['job_ls']['p50'] * 1000:.0f} ms CPU), sf job status p50 "
        f"{status * 1000:.0f} ms ({cpu['job_status']['p50'] * 1000:.0f} ms CPU), python -c pass "
        f"{ours['python_start']['p50'] * 1000:.0f} ms ({cpu['python_start']['p50'] * 1000:.0f} ms CPU)"
    )
    ray_list = ray["job_list"]["p50"] if ray else None
    ray_status = ray["job_status"]["p50"] if ray else None
    squeue_p50 = squeue["squeue"]["p50"] if squeue else None
    details = {"ours": ours, "squeue": squeue, "ray": ray, "note": note, "pid": os.getpid()}
    ray_note = f"; `ray job list`: {ray_list * 1000:.0f} ms" if ray_list else ""
    peers_run = note != PEER_NOT_RUN
    return [
        Result(
            name="cli-ls",
            metric="`sf job ls` wall time, warm console, 20 jobs, p50",
            figure=ls,
            unit="s",
            peer=(
                (f"`squeue` (Slurm {squeue['slurm_version']}), 20 held jobs, p50" if squeue else "`ray job list`, p50")
                + (ray_note if squeue else "")
                if peers_run
                else PEER_NOT_RUN
            ),
            peer_figure=squeue_p50 if squeue else ray_list,
            ratio=ratio_lower_better(ls, squeue_p50 if squeue else ray_list),
            ratio_note=("squeue" if squeue else "Ray") + " / ours",
            target=f"<= {TARGET_S:.3f} s",
            met=ls <= TARGET_S,
            command="python -m bench cli",
            details=details,
        ),
        Result(
            name="cli-status",
            metric="`sf job status <id>` wall time, warm console, p50",
            figure=status,
            unit="s",
            peer="`ray job status <id>`, Ray head of the same run, p50" if peers_run else PEER_NOT_RUN,
            peer_figure=ray_status,
            ratio=ratio_lower_better(status, ray_status),
            ratio_note="Ray / ours",
            target=f"<= {TARGET_S:.3f} s",
            met=status <= TARGET_S,
            command="python -m bench cli",
            details=details,
        ),
    ]
