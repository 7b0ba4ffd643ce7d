"""Admission throughput: SubmitJob calls admitted per second from 32 concurrent clients.

Ours: the real embedded console (`sf up`, its own process) on SQLite, then on a fresh PostgreSQL
database; 32 clients, each with its own gRPC connection, submit the same trivial custom/custom job
(workspace already uploaded) in a loop, each submission with a request id of its own as `sf submit`
sends. The fleet is drained first, so admitted jobs stay QUEUED
(the scheduler still runs its cycles over the growing queue, as it would in production).

Peer: slurmrestd of the project's Slurm 24.11 test cluster (tools/slurm), 32 concurrent clients
(`SlurmClient`, one HTTP connection pool each) submitting a trivial held batch job (`hold: true`,
so it is queued and never runs, like our drained fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import psycopg
from starforge_api.control.v1 import control_service_pb2 as ctl

from bench.common import (
    CONSOLE_CPUS,
    LOADGEN_CPUS,
    PEER_NOT_RUN,
    QUICK,
    REPO,
    Result,
    cpu_seconds,
    free_port,
    fresh_dir,
    loadavg,
    log,
    pinned,
    pinned_command,
    pinning,
    ratio_higher_better,
    rss_mib,
    skip_peer,
    stop_pid,
    summary,
)
from bench.console import CONSOLE_YAML, Client, Console, running_console
from bench.trivial import TRAIN_SH
from common.channel import aio_channel

CLIENTS = 32
WARMUP_S = 0.5 if QUICK else 2.0
MEASURE_S = 2.0 if QUICK else 10.0
PG_ADMIN = os.environ.get("STARFORGE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


async def _storm(call: Callable[[int], Awaitable[Any]], *server_pids: int) -> dict[str, float]:
    """CLIENTS loops of `call(client_index)`; counts completions inside the measuring window.

    With `server_pids`, also the servers' CPU time per admitted call in that window (their process
    CPU from /proc, summed): on a shared machine the wall rate moves with everyone's load, the CPU
    spent per call much less. The load generator's own CPU per call is recorded too."""
    start = time.monotonic()
    begin, end = start + WARMUP_S, start + WARMUP_S + MEASURE_S
    done = 0
    errors = 0
    latencies: list[float] = []
    cpu: dict[str, float] = {}

    async def sample_cpu() -> None:
        await asyncio.sleep(max(0.0, begin - time.monotonic()))
        cpu["server0"], cpu["client0"] = sum(map(cpu_seconds, server_pids)), time.process_time()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        cpu["server1"], cpu["client1"] = sum(map(cpu_seconds, server_pids)), time.process_time()

    async def loop(i: int) -> None:
        nonlocal done, errors
        while True:
            t0 = time.monotonic()
            if t0 >= end:
                return
            try:
                await call(i)
            except Exception as exc:
                errors += 1
                if errors <= 3:
                    log(f"submission failed: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            t1 = time.monotonic()
            if begin <= t1 < end:
                done += 1
                latencies.append(t1 - t0)

    sampler = asyncio.ensure_future(sample_cpu()) if server_pids else None
    await asyncio.gather(*(loop(i) for i in range(CLIENTS)))
    out = {"per_s": done / MEASURE_S, "admitted": done, "errors": errors, **{
        f"latency_{k}": v for k, v in summary(latencies).items() if k != "n"
    }}  # fmt: skip
    if sampler is not None:
        await sampler
        if done:
            out["server_cpu_ms_per_call"] = (cpu["server1"] - cpu["server0"]) * 1000 / done
            out["client_cpu_ms_per_call"] = (cpu["client1"] - cpu["client0"]) * 1000 / done
            out["server_cpu_share"] = (cpu["server1"] - cpu["server0"]) / MEASURE_S
    return out


async def _ours(console: Console, replica: Console | None = None) -> dict[str, float]:
    """The storm against `console`; with a `replica`, every other client talks to the replica
    instead (as a round-robin load balancer in front of both would spread them)."""
    setup = Client(console)
    spec = await setup.custom_spec(TRAIN_SH)
    await setup.drain()
    addresses = [console.address, replica.address] if replica else [console.address]
    clients = [Client(console, aio_channel(addresses[i % len(addresses)])) for i in range(CLIENTS)]
    pids = [console.proc.pid] + ([replica.proc.pid] if replica else [])
    try:
        # each submission with a request id of its own, as `sf submit` sends one: the ledger
        # checks it against the jobs already queued (idempotent retries)
        return await _storm(lambda i: clients[i].submit(spec, request_id=str(uuid.uuid4())), *pids)
    finally:
        for c in clients:
            await c.close()
        await setup.close()


def measure_ours(database_url: str = "") -> dict[str, Any]:
    work = fresh_dir("admission-" + ("pg" if database_url else "sqlite"))
    with running_console(work / "console", database_url=database_url) as console:
        load = loadavg()
        with pinned(LOADGEN_CPUS):  # the load generator is this process
            out: dict[str, Any] = dict(asyncio.run(_ours(console)))
        out.update(console.memory())
    out["load_before"] = load[0]
    out.update(pinning())
    return out


@contextlib.contextmanager
def running_replicas(work: pathlib.Path, database_url: str) -> Iterator[tuple[Console, Console]]:
    """Two control planes (`starforge-control`, each its own process) on one PostgreSQL and one
    blob directory, with one local executor (process runtime) as their fleet: the deployment of
    docs/deploy.md on one host. The first one's bootstrap admin token works on both."""
    from control.embedded import start_executor, stop_process

    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    executor, executor_address = start_executor(work, "process", token)
    replicas: list[subprocess.Popen[bytes]] = []
    try:
        consoles = []
        for name in ("a", "b"):
            state = work / f"control-{name}"
            proc, address = _start_replica(state, database_url, work / "blobs", executor_address, token)
            replicas.append(proc)
            admin_token = (work / "control-a" / "admin-token").read_text().strip()
            consoles.append(Console(proc, state, address, admin_token, "admin"))
            asyncio.run(_until_serving(consoles[-1]))
            log(f"replica {name}: pid {proc.pid} at {address}")
        yield consoles[0], consoles[1]
    finally:
        for proc in replicas:
            stop_pid(proc, 30)
        stop_process(executor)


def _start_replica(
    state: pathlib.Path, database_url: str, blobs: pathlib.Path, executor_address: str, executor_token: str
) -> tuple[subprocess.Popen[bytes], str]:
    state.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    fleet = (
        "fleets:\n  - {name: local, kind: local, host_runtime: true,\n"
        f"     address: '{executor_address}', token: '{executor_token}',\n"
        "     inventory: [{series: cpu, nodes: 1, gpus_per_node: 0, slots: 4}]}\n"
    )
    config = state / "control.yaml"
    config.write_text(
        CONSOLE_YAML
        + f"listen: {address}\nstate_dir: {state}\ndatabase_url: {database_url}\nblob_dir: {blobs}\n"
        + "bootstrap_admin: admin\n"
        + fleet
    )
    config.chmod(0o600)  # it holds the executor's token
    cmd = pinned_command([sys.executable, "-m", "control.main", "--config", str(config)], CONSOLE_CPUS)
    logf = (state / "control.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    deadline = time.monotonic() + 120
    while not (state.parent / "control-a" / "admin-token").exists():  # the first replica's bootstrap
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_pid(proc)
            raise RuntimeError(f"replica in {state} did not start:\n{(state / 'control.log').read_text()[-3000:]}")
        time.sleep(0.05)
    return proc, address


async def _until_serving(console: Console) -> None:
    deadline = time.monotonic() + 120
    client = Client(console)
    try:
        while True:
            try:
                await client.control.GetServerInfo(ctl.GetServerInfoRequest(), metadata=client.md, timeout=2)
                return
            except grpc.aio.AioRpcError:
                if console.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the replica did not start (exit {console.proc.poll()})") from None
                await asyncio.sleep(0.2)
    finally:
        await client.close()


def measure_replicas(database_url: str) -> dict[str, Any]:
    """Two control planes on one PostgreSQL, half the clients on each: what a second process adds
    when one process's GIL is the limit (on this machine both share its two cores)."""
    with running_replicas(fresh_dir("admission-pg-replicas"), database_url) as (a, b):
        load = loadavg()
        with pinned(LOADGEN_CPUS):
            out: dict[str, Any] = dict(asyncio.run(_ours(a, b)))
        out["control_rss_mib"] = [rss_mib(c.proc.pid)["rss"] for c in (a, b)]
    out["load_before"] = load[0]
    out.update(pinning())
    return out


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    name = f"sf_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure_slurm() -> dict[str, float]:
    from executor_svc.slurm.client import SlurmClient
    from executor_svc.slurm.models import BatchJob
    from tools.slurm import cluster

    run_dir = fresh_dir("slurm")
    info = cluster.start(run_dir, die_with_caller=True, log=lambda m: log(f"slurm: {m}"))
    try:
        job = BatchJob(
            name="sfbench",
            script="#!/bin/sh\ntrue\n",
            working_directory=info.staging_dir,
            partition=info.partition,
            extra={"hold": True},
        )

        async def go() -> dict[str, float]:
            clients = [SlurmClient(info.restd_url, user=info.user, token=info.token) for _ in range(CLIENTS)]
            try:
                return await _storm(lambda i: clients[i].submit(job))
            finally:
                for c in clients:
                    await c.aclose()

        out = asyncio.run(go())
        out["slurm_version"] = info.slurm_version  # type: ignore[assignment]
        return out
    finally:
        cluster.stop(run_dir)


def run() -> list[Result]:
    slurm: dict[str, Any] = {"per_s": None}
    if not skip_peer("admission"):
        log("admission: slurmrestd peer")
        slurm = measure_slurm()
        log(f"admission: slurm {slurm['per_s']:.0f}/s; ours on SQLite")
    sqlite = measure_ours()
    log(f"admission: sqlite {sqlite['per_s']:.0f}/s; ours on PostgreSQL")
    with pg_database() as url:
        pg = measure_ours(url)
    log(f"admission: postgres {pg['per_s']:.0f}/s; two replicas on PostgreSQL")
    with pg_database() as url:
        pg2 = measure_replicas(url)
    log(f"admission: two replicas {pg2['per_s']:.0f}/s; the no-op gRPC floor")
    from bench import grpc_floor

    floor = grpc_floor.measure()
    rows = []
    cases = (
        ("sqlite", "SQLite", sqlite, 2000.0),
        ("postgresql", "PostgreSQL", pg, 1000.0),
        ("postgresql-2-replicas", "PostgreSQL, 2 control-plane replicas", pg2, 1000.0),
    )
    for name, db, ours, target in cases:
        ratio = ratio_higher_better(ours["per_s"], slurm["per_s"])
        rows.append(
            Result(
                name=f"admission-{name}",
                metric=f"admitted submissions/s, 32 clients, {db}",
                figure=ours["per_s"],
                unit="/s",
                peer="slurmrestd 24.11 job submit (held jobs), 32 clients" if slurm["per_s"] else PEER_NOT_RUN,
                peer_figure=slurm["per_s"],
                ratio=ratio,
                ratio_note="ours / slurmrestd",
                target=f">= {target:.0f}/s and >= 2x slurmrestd",
                met=ours["per_s"] >= target and (ratio or 0) >= 2,
                command="python -m bench admission",
                details={"ours": ours, "slurm": slurm, "grpc_floor": floor},
            )
        )
    return rows


if __name__ == "__main__":
    import json
    import sys

    # `python -m bench.admission ours [DATABASE_URL]`: our side alone (no peer, no floor), as JSON
    if sys.argv[1:2] != ["ours"]:
        raise SystemExit("usage: python -m bench.admission ours [DATABASE_URL]")
    print(json.dumps(measure_ours(sys.argv[2] if len(sys.argv) > 2 else "")))
