"""End-to-end throughput: 1,000 trivial jobs submitted at once by 8 clients, until all SUCCEEDED.

Ours: the real embedded console (`sf up`: control plane + local executor, process runtime, SQLite
ledger) with 16 CPU slots, as many jobs at once as the Slurm peer's two nodes of 8 CPUs run
(`STARFORGE_BENCH_SLOTS=N` sets the `slots` of executor.yaml's cpu series, as a user edits it;
0: `sf up`'s default, one per core and at least 4). The workspace of a custom/custom
job whose train.sh is `true` is uploaded once; then 8 clients (one gRPC channel each) submit
their share of the jobs one after another, all 8 at the same time. A job's submit time is taken
on the client right before its
SubmitJob call; its end is the server's SUCCEEDED event time (same machine, same clock), read from
the ledger once every job has ended. Figures: jobs finished per second (jobs / (last SUCCEEDED -
first submit)) and the p99 of submit -> SUCCEEDED. The CPU time of the control plane and of the
executor (with the attempts it waited for) over the run says what the machine spent where.

Peers, on the same machine: Ray Jobs (a local head in a loopback-only netns, 8 threads each
with its own JobSubmissionClient submitting `true`, end from the job's `end_time`), and Slurm
(slurmrestd of the project's Slurm 24.11 test cluster, two nodes of 8 CPUs, 8 clients submitting
a `#!/bin/sh true` batch job, end from the job's `end_time`, which Slurm keeps in whole seconds).

Before its clock starts, each side runs one job to its end (`WARMUP_JOBS`, not counted), as a
node that has run a job before would be: Slurm's cluster is started and its nodes IDLE before its
run, and a fresh node of ours installs the runner's venv and starts the pre-forked runner for its
first job (the executor starts that as it starts: `local.warm_capsule`); the details keep what
that first job of ours waited (`first_running_s`, submit -> RUNNING).

Ray runs once, and at most 200 jobs (`STARFORGE_BENCH_RAY_JOBS`): it finishes about one a second
here. Slurm and ours run ROUNDS alternated rounds
(`STARFORGE_BENCH_THROUGHPUT_ROUNDS`, 3), each after the machine is quiet (`common.settle`), and
each side's figure is its median round: one round moves by a quarter between runs here. Each
round also records how many cores the whole machine was busy (`cores_busy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import sqlite3
import time
from typing import Any

from starforge_api.job.v1 import job_state_pb2 as st

from bench.common import (
    PEER_NOT_RUN,
    QUICK,
    WORK,
    Result,
    child_pids,
    cores_busy,
    env_int,
    fresh_dir,
    loadavg,
    log,
    machine_cpu,
    median_item,
    ratio_higher_better,
    ratio_lower_better,
    run_peer,
    settle,
    skip_peer,
    summary,
)
from bench.console import Client, Console, running_console
from common.channel import aio_channel

# STARFORGE_BENCH_E2E_JOBS sets the number in quick mode too (24 there unless it does)
JOBS = env_int("STARFORGE_BENCH_E2E_JOBS", 24 if QUICK else 1000, minimum=1)
# Ray finishes about one trivial job a second here: 1,000 would take it a quarter of an hour, so
# it runs at most 200 unless STARFORGE_BENCH_RAY_JOBS says otherwise (its row names its count)
RAY_JOBS = env_int("STARFORGE_BENCH_RAY_JOBS", min(JOBS, 200), minimum=1)
# the Slurm peer's CPUs (2 nodes x 8): the same number of jobs at once; 0: sf up's default
SLOTS = env_int("STARFORGE_BENCH_SLOTS", 16)
CLIENTS = 8
ROUNDS = 1 if QUICK else env_int("STARFORGE_BENCH_THROUGHPUT_ROUNDS", 3, minimum=1)
TIMEOUT_S = 1800.0
STALL_S = 120.0  # no job ended for this long: something is stuck
TRAIN_SH = "#!/usr/bin/env bash\ntrue\n"
# jobs each side runs to their end before the clock starts, not counted: the row measures a node
# that is ready, as Slurm's run starts once both its nodes are IDLE (a first job on a fresh node
# of ours waits for the runner venv and the pre-forked runner; `first_running_s` says how long)
WARMUP_JOBS = 1
ROUND_FOLDER = "throughput-round-"  # WORK/<this><n>: round n of ours (`clear_rounds`)
TERMINAL = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)
# the states of a Slurm job that ended without completing
SLURM_FAILED = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of `pid`; with `children`, also of the children it waited for
    and of those still running with theirs (the executor's pre-forked runner, whose runners it
    waits for itself)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if children else 0)
        own = ticks / os.sysconf("SC_CLK_TCK")
        if not children:
            return own
        # gone meanwhile: no children, its own figure still counts
        return own + sum(cpu_seconds(k, children=True) for k in child_pids(pid))
    return 0.0


def _shares(n: int, k: int) -> list[int]:
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


async def _ours(console: Console) -> dict[str, Any]:
    setup = Client(console)
    spec = await setup.custom_spec(TRAIN_SH, experiment="e2e")
    clients = [Client(console, aio_channel(console.address)) for _ in range(CLIENTS)]
    submitted: dict[str, float] = {}
    db = console.state_dir / "ledger.db"
    pids = console.pids()
    first_running_s = await _warm_up(setup, spec, db)
    cpu0 = [cpu_seconds(p, children=c) for p in pids for c in (False, True)]
    try:

        async def client(i: int, n: int) -> None:
            for _ in range(n):
                t0 = time.time()
                job = await clients[i].submit(spec)
                submitted[job.job_id] = t0

        t_start, machine0 = time.time(), machine_cpu()
        await asyncio.gather(*(client(i, n) for i, n in enumerate(_shares(JOBS, CLIENTS))))
        t_submitted = time.time()
        log(f"throughput: {JOBS} jobs submitted in {t_submitted - t_start:.1f} s; waiting for them to end")
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            marks = ",".join(str(s) for s in TERMINAL)
            deadline = time.monotonic() + TIMEOUT_S
            last, moved = -1, time.monotonic()
            while True:
                done = conn.execute(f"SELECT count(*) FROM jobs WHERE state IN ({marks})").fetchone()[0] - WARMUP_JOBS
                if done >= JOBS:
                    break
                if done != last:
                    moved = time.monotonic()
                if time.monotonic() > deadline or time.monotonic() - moved > STALL_S:
                    stuck = conn.execute(
                        f"SELECT a.id, a.state, a.reason FROM attempts a JOIN jobs j ON j.id = a.job_id "
                        f"WHERE j.state NOT IN ({marks}) LIMIT 5"
                    ).fetchall()
                    raise RuntimeError(f"{done} of {JOBS} jobs ended, none for {STALL_S:.0f} s; waiting: {stuck}")
                if done // 100 != last // 100:
                    log(f"throughput: {done}/{JOBS} ended after {time.time() - t_start:.0f} s")
                last = done
                await asyncio.sleep(0.2)
            cpu1 = [cpu_seconds(p, children=c) for p in pids for c in (False, True)]
            machine1, t_end = machine_cpu(), time.time()
            rows = conn.execute(
                "SELECT job_id, min(at) FROM job_events WHERE to_state = ? GROUP BY job_id", (st.JOB_STATE_SUCCEEDED,)
            ).fetchall()
            states = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
            stages = conn.execute(
                "SELECT job_id, to_state, min(at) FROM job_events WHERE to_state IN (?, ?, ?) "
                "GROUP BY job_id, to_state",
                (st.JOB_STATE_QUEUED, st.JOB_STATE_RUNNING, st.JOB_STATE_SUCCEEDED),
            ).fetchall()
        finally:
            conn.close()
    finally:
        for c in clients:
            await c.close()
        await setup.close()
    ended = {job_id: at for job_id, at in rows if job_id in submitted}
    if len(ended) < JOBS:
        named = {st.JobState.Name(k): v for k, v in states.items()}
        raise RuntimeError(f"{len(ended)} of {JOBS} jobs SUCCEEDED (states: {named})")
    by_job: dict[str, dict[int, float]] = {}
    for job_id, state, at in stages:
        if job_id in submitted:
            by_job.setdefault(job_id, {})[state] = at
    queued_to_running = [v[st.JOB_STATE_RUNNING] - v[st.JOB_STATE_QUEUED] for v in by_job.values() if len(v) == 3]
    running_to_done = [v[st.JOB_STATE_SUCCEEDED] - v[st.JOB_STATE_RUNNING] for v in by_job.values() if len(v) == 3]
    latencies = [ended[j] - t0 for j, t0 in submitted.items()]
    span = max(ended.values()) - t_start
    return {
        "jobs": JOBS,
        "per_s": JOBS / span,
        "span_s": span,
        "submit_s": t_submitted - t_start,
        "latency": summary(latencies),
        # the whole machine's cores busy from the first submit to the last end: the bench's
        # clients included, as they are in the peers' figure
        "cores_busy": round(cores_busy(machine0, machine1, t_end - t_start), 2),
        "warmup_jobs": WARMUP_JOBS,
        "first_running_s": first_running_s,
        "queued_to_running": summary(queued_to_running),
        "running_to_succeeded": summary(running_to_done),
        # "with_children": the process's whole tree, so the control plane's includes the executor's;
        # the executor's includes the attempts (a pre-forked runner's wrappers, or bootstrap.sh's)
        "cpu_s": {
            name: round(b - a, 1)
            for name, a, b in zip(
                ("control", "control_with_children", "executor", "executor_with_children"), cpu0, cpu1, strict=False
            )
        },
    }


async def _warm_up(setup: Client, spec: Any, db: pathlib.Path) -> float | None:
    """WARMUP_JOBS jobs, one after another, each to its end; the first one's submit -> RUNNING
    in seconds (what a first job on this fresh node waited), None without one."""
    first: float | None = None
    for _ in range(WARMUP_JOBS):
        t0 = time.time()
        job = await setup.submit(spec)
        deadline = time.monotonic() + STALL_S
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            while True:
                (state,) = conn.execute("SELECT state FROM jobs WHERE id = ?", (job.job_id,)).fetchone()
                if state in TERMINAL:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the warm-up job {job.job_id} did not end in {STALL_S:.0f} s")
                await asyncio.sleep(0.05)
            if state != st.JOB_STATE_SUCCEEDED:
                raise RuntimeError(f"the warm-up job {job.job_id} ended {st.JobState.Name(state)}")
            running = conn.execute(
                "SELECT min(at) FROM job_events WHERE job_id = ? AND to_state = ?", (job.job_id, st.JOB_STATE_RUNNING)
            ).fetchone()[0]
        finally:
            conn.close()
        if first is None and running is not None:
            first = round(running - t0, 2)
    return first


def set_cpu_slots(state_dir: pathlib.Path, slots: int) -> None:
    """executor.yaml as `sf up` writes it, with the cpu series' slots set to `slots`."""
    import yaml

    from control.embedded import executor_config

    state_dir.mkdir(parents=True, exist_ok=True)
    path = executor_config(state_dir, "process")
    doc = yaml.safe_load(path.read_text())
    for entry in doc["local"]["inventory"]:
        if entry["series"] == "cpu":
            entry["slots"] = slots
    path.write_text(yaml.safe_dump(doc))


def measure_ours(folder: str = "throughput") -> dict[str, Any]:
    """One round of ours in WORK/`folder` (a fresh console, its ledger and its executor's state)."""
    work = fresh_dir(folder)
    if SLOTS:
        set_cpu_slots(work / "console", SLOTS)
    with running_console(work / "console") as console:
        load = loadavg()
        out = asyncio.run(_ours(console))
        out["memory"] = console.memory()
    out["load_before"] = load[0]
    return out


def measure_ray() -> dict[str, Any]:
    work = fresh_dir("ray-throughput")
    return run_peer(
        "ray_peer.py",
        [
            "--work",
            str(work),
            "--throughput",
            str(RAY_JOBS),
            "--warmup",
            str(WARMUP_JOBS),
            "--clients",
            str(CLIENTS),
            "--timeout",
            str(TIMEOUT_S),
        ],
        timeout=TIMEOUT_S + 300,
    )


def measure_slurm() -> dict[str, Any]:
    from executor_svc.slurm.client import SlurmClient
    from executor_svc.slurm.models import BatchJob
    from tools.slurm import cluster

    run_dir = fresh_dir("slurm-throughput")
    info = cluster.start(run_dir, die_with_caller=True, log=lambda m: log(f"slurm: {m}"))
    try:
        job = BatchJob(
            name="sfbench-e2e", script="#!/bin/sh\ntrue\n", working_directory=info.staging_dir, partition=info.partition
        )

        async def go() -> dict[str, Any]:
            clients = [SlurmClient(info.restd_url, user=info.user, token=info.token) for _ in range(CLIENTS)]
            submitted: dict[int, float] = {}
            ended: dict[int, float] = {}
            failed: dict[int, str] = {}
            try:
                await _slurm_warm_up(clients[0], job)

                async def client(i: int, n: int) -> None:
                    for _ in range(n):
                        t0 = time.time()
                        r = await clients[i].submit(job)
                        submitted[r.job_id] = t0

                t_start, machine0 = time.time(), machine_cpu()
                await asyncio.gather(*(client(i, n) for i, n in enumerate(_shares(JOBS, CLIENTS))))
                t_submitted = time.time()
                deadline = time.monotonic() + TIMEOUT_S
                # slurmctld forgets a finished job after MinJobAge (300 s): ends are kept as they are seen
                while len(ended) + len(failed) < JOBS:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"slurm: only {len(ended)} of {JOBS} jobs completed in {TIMEOUT_S:.0f} s")
                    for sj in await clients[0].list_jobs():
                        if sj.job_id not in submitted or sj.job_id in ended or sj.job_id in failed:
                            continue
                        if sj.state == "COMPLETED" and sj.end_time is not None:
                            ended[sj.job_id] = sj.end_time.timestamp()
                        elif sj.state in SLURM_FAILED:
                            failed[sj.job_id] = sj.state
                    await asyncio.sleep(0.5)
                machine1, t_end = machine_cpu(), time.time()
            finally:
                for c in clients:
                    await c.aclose()
            if failed:
                raise RuntimeError(f"slurm: {len(failed)} jobs did not complete: {list(failed.items())[:5]}")
            span = max(ended.values()) - t_start
            return {
                "jobs": JOBS,
                "per_s": JOBS / span,
                "span_s": span,
                "submit_s": t_submitted - t_start,
                "latency": summary([ended[j] - t0 for j, t0 in submitted.items()]),
                # slurmctld, slurmd, the job steps and the bench's clients, as for ours
                "cores_busy": round(cores_busy(machine0, machine1, t_end - t_start), 2),
                "slurm_version": info.slurm_version,
                "warmup_jobs": WARMUP_JOBS,
            }

        return asyncio.run(go())
    finally:
        cluster.stop(run_dir)


async def _slurm_warm_up(client: Any, job: Any) -> None:
    """WARMUP_JOBS of the same batch job, one after another, each to COMPLETED, as ours."""
    for _ in range(WARMUP_JOBS):
        job_id = (await client.submit(job)).job_id
        deadline = time.monotonic() + STALL_S
        while True:
            state = next((sj.state for sj in await client.list_jobs() if sj.job_id == job_id), "")
            if state == "COMPLETED":
                break
            if state in SLURM_FAILED or time.monotonic() > deadline:
                raise RuntimeError(f"slurm: the warm-up job {job_id} ended {state or 'nowhere'}")
            await asyncio.sleep(0.1)


def clear_rounds() -> None:
    """The folders of an earlier run's rounds, deleted when the row starts; each round then gets a
    folder of its own and none is deleted until the next run. On ext4 without a journal (our
    machines) the kernel checks every new inode against each one freed in its block group in the
    last minute (five while the inode table is not written back): deleting the last round's 1,000
    attempts just before a round made an attempt's files cost 0.3-0.4 ms each instead of ~10 us,
    a tax on our side that Slurm's rounds never paid (docs/benchmarks.md, throughput). In a full
    run Ray's run, minutes long, comes between this deletion and our first round."""
    for old in WORK.glob(f"{ROUND_FOLDER}*"):
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def _kept(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Each side's figures are written as soon as measured (a later side may fail or hang)."""
    (WORK / f"throughput-{name}.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose jobs/s is the median of `runs` (the lower middle one of an even count), with
    every run's jobs/s beside it."""
    chosen = dict(median_item(runs, lambda r: float(r["per_s"])))
    chosen["rounds_per_s"] = [round(r["per_s"], 2) for r in runs]
    return chosen


def run() -> list[Result]:
    """The Ray peer once (it takes minutes), then ROUNDS alternated rounds of the Slurm peer and
    ours, each on a quiet machine: the row's figures are each side's median round. One round of
    either moves by a quarter between runs on this machine (the disk's and the host's noise)."""
    ray: dict[str, Any] | None = None
    slurms: list[dict[str, Any]] = []
    ours_runs: list[dict[str, Any]] = []
    peers = not skip_peer("throughput")
    clear_rounds()
    if peers:
        log(f"throughput: Ray peer ({RAY_JOBS} jobs)")
        ray = _kept("ray", measure_ray())
        log(f"throughput: Ray {ray['per_s']:.2f} jobs/s ({ray['succeeded']}/{RAY_JOBS} SUCCEEDED)")
    for i in range(ROUNDS):
        if peers:
            settle()  # the last side's teardown must not run into this one
            slurm_run = _kept(f"slurm-{i + 1}", measure_slurm())
            slurms.append(slurm_run)
            busy = slurm_run["cores_busy"]
            log(f"throughput: round {i + 1}: Slurm {slurm_run['per_s']:.1f} jobs/s ({busy} cores busy)")
        settle()
        ours_run = _kept(f"ours-{i + 1}", measure_ours(f"{ROUND_FOLDER}{i + 1}"))
        ours_runs.append(ours_run)
        log(
            f"throughput: round {i + 1}: ours {ours_run['per_s']:.1f} jobs/s ({ours_run['cores_busy']} cores busy), "
            f"p99 {ours_run['latency']['p99']:.1f} s, CPU {ours_run['cpu_s']}"
        )
    ours = _median_run(ours_runs)
    slurm = _median_run(slurms) if slurms else None
    rate_ray = ratio_higher_better(ours["per_s"], ray["per_s"] if ray else None)
    rate_slurm = ratio_higher_better(ours["per_s"], slurm["per_s"] if slurm else None)
    details = {"ours": ours, "ray": ray, "slurm": slurm, "ours_rounds": ours_runs, "slurm_rounds": slurms}
    load = f"{JOBS:,} trivial jobs, {CLIENTS} clients"
    p99 = ours["latency"]["p99"]
    peer_p99 = {k: (v["latency"]["p99"] if v else None) for k, v in (("ray", ray), ("slurm", slurm))}
    return [
        Result(
            name="throughput-ray",
            metric=f"jobs SUCCEEDED/s, {load}, local fleet (process runtime, {SLOTS or 'default'} slots)",
            figure=ours["per_s"],
            unit="jobs/s",
            peer=f"Ray {ray.get('ray_version', '')} Jobs, local head, {RAY_JOBS:,} jobs, {CLIENTS} clients"
            if ray
            else PEER_NOT_RUN,
            peer_figure=ray["per_s"] if ray else None,
            ratio=rate_ray,
            ratio_note="ours / Ray",
            target=">= 5x Ray",
            met=(rate_ray or 0) >= 5,
            command="python -m bench throughput",
            details=details,
        ),
        Result(
            name="throughput-slurm",
            metric=f"jobs SUCCEEDED/s, {load}, vs Slurm",
            figure=ours["per_s"],
            unit="jobs/s",
            peer=f"slurmrestd {slurm.get('slurm_version', '')}, 2 nodes x 8 CPUs, {CLIENTS} clients"
            if slurm
            else PEER_NOT_RUN,
            peer_figure=slurm["per_s"] if slurm else None,
            ratio=rate_slurm,
            ratio_note="ours / Slurm",
            target=">= Slurm",
            met=(rate_slurm or 0) >= 1,
            command="python -m bench throughput",
            details=details,
        ),
        Result(
            name="throughput-p99",
            metric=f"submit -> SUCCEEDED, {load}, p99",
            figure=p99,
            unit="s",
            peer=f"Ray Jobs ({RAY_JOBS:,} jobs), p99" if ray else PEER_NOT_RUN,
            peer_figure=peer_p99["ray"],
            ratio=ratio_lower_better(p99, peer_p99["ray"]),
            ratio_note="Ray / ours" + (f"; Slurm p99 {peer_p99['slurm']:.1f} s" if peer_p99["slurm"] else ""),
            target="(reported)",
            met=None,
            command="python -m bench throughput",
            details={},
        ),
    ]
