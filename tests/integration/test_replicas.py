"""Two control plane replicas on one PostgreSQL share the queue: every job runs, none twice.

One replica's scheduler leads (an advisory lock, control/scheduler/leader.py) and places every
job, whichever replica queued it; job rows are claimed with FOR UPDATE SKIP LOCKED all the same,
so each job becomes exactly one attempt, launched once — checked from the executor's own records.
When the leader dies (kill -9) another replica takes over and dispatches. Replicas share the blob
directory (as they would share NFS or an object store in a deployment).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import cast

import grpc
import psycopg
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel
from control import embedded
from control.app import ControlApp, start_control
from tests.db import create_pg_database, drop_pg_database
from tests.integration.console import (
    EXECUTOR_TOKEN,
    REPO,
    Console,
    console,
    executor_yaml,
    start_executor_process,
)
from tests.ports import free_port

JOBS = 40


async def test_two_replicas_never_dispatch_the_same_attempt_twice(tmp_path: pathlib.Path) -> None:
    url = create_pg_database()
    try:
        async with console(
            tmp_path,
            database_url=url,
            blob_dir=tmp_path / "shared-blobs",
            local={"inventory": [{"series": "cpu", "gpus": 0, "slots": 8}]},
        ) as c:
            twin_cfg = dataclasses.replace(c.app.ctx.cfg, state_dir=tmp_path / "replica-b", listen="127.0.0.1:0")
            twin = await start_control(twin_cfg)
            try:
                first = await c.submit_custom("#!/usr/bin/env bash\necho ran $FORGE_ATTEMPT_ID\n")
                spec = (await c.get(first.job_id)).spec
                ids = [first.job_id]
                for i in range(1, JOBS):
                    r = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=f"r{i}"), metadata=c.md)
                    ids.append(r.job.job_id)
                for job_id in ids:
                    done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=300)
                    assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
                launches = await c.app.ctx.db.run(
                    lambda s: [a.launch for a in s.query(__import__("control.db.models", fromlist=["m"]).Attempt)]
                )
                assert len(launches) == JOBS
                claimed_by = set()
                for data in launches:
                    req = lr.LaunchRequest()
                    req.ParseFromString(data)
                    claimed_by.add(req.ingest.address)
                # the first replica took the scheduler's lock: it placed every job
                assert claimed_by == {c.app.address}, "only the leading replica should have dispatched"
            finally:
                await twin.stop(0)
        attempts = sorted(p.name for p in (tmp_path / "executor" / "attempts").iterdir())
        assert sorted(a.rsplit(".", 1)[0] for a in attempts) == sorted(ids)
        assert all(a.endswith(".1") for a in attempts)
        for a in attempts:
            log = (tmp_path / "executor" / "attempts" / a / "bootstrap.log").read_text()
            assert log.count(f"ran {a}") == 1
    finally:
        drop_pg_database(url)


def _start_replica(
    root: pathlib.Path, name: str, url: str, executor_address: str
) -> tuple[subprocess.Popen[bytes], str]:
    """A `starforge-control` process on `url`, the shared blob directory and the one executor."""
    state = root / f"control-{name}"
    state.mkdir(parents=True)
    address = f"127.0.0.1:{free_port()}"
    config = {
        "listen": address,
        "state_dir": str(state),
        "database_url": url,
        "blob_dir": str(root / "shared-blobs"),
        "capsule_dir": str(embedded.ensure_capsule()),
        "bootstrap_admin": "admin",
        "default_images": {"custom": "host"},
        "image_allowlist": [],
        "hf_precheck": False,
        "scheduler_interval_seconds": 0.2,
        "reconcile_interval_seconds": 0.5,
        "fleets": [
            {
                "name": "local",
                "kind": "local",
                "address": executor_address,
                "token": EXECUTOR_TOKEN,
                "host_runtime": True,
                "inventory": [{"series": "cpu", "nodes": 1, "gpus_per_node": 0, "slots": 4}],
            }
        ],
    }
    path = state / "control.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)  # it holds the executor's token
    log = (state / "control.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "control.main", "--config", str(path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=REPO,
    )
    return proc, address


async def _serving(proc: subprocess.Popen[bytes], address: str, token_file: pathlib.Path) -> Console:
    """A client of the replica once it answers (the admin token is the first replica's)."""
    deadline = time.monotonic() + 120
    while not token_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the replica did not start"
        await asyncio.sleep(0.1)
    channel = aio_channel(address)
    client = Console(cast(ControlApp, None), token_file.read_text().strip(), token_file.parent, None, "", channel)
    while True:
        try:
            await client.jobs.GetServerInfo(ctl.GetServerInfoRequest(), metadata=client.md, timeout=2)
            return client
        except grpc.aio.AioRpcError:
            assert proc.poll() is None and time.monotonic() < deadline, "the replica did not serve"
            await asyncio.sleep(0.2)


def _dispatched_by(url: str, job_id: str) -> set[str]:
    """The replica addresses the job's attempts were claimed by (their LaunchRequest's ingest)."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        rows = conn.execute("SELECT launch FROM attempts WHERE job_id = %s", (job_id,)).fetchall()
    out = set()
    for (data,) in rows:
        req = lr.LaunchRequest()
        req.ParseFromString(bytes(data))
        out.add(req.ingest.address)
    return out


def _leader_held(url: str) -> bool:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    return bool(row and row[0])


async def test_a_killed_leader_is_replaced_and_the_other_replica_dispatches(tmp_path: pathlib.Path) -> None:
    url = create_pg_database()
    executor, executor_address = start_executor_process(tmp_path, executor_yaml(tmp_path, "process"))
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[Console] = []
    try:
        leader, leader_address = _start_replica(tmp_path, "a", url, executor_address)
        procs.append(leader)
        clients.append(await _serving(leader, leader_address, tmp_path / "control-a" / "admin-token"))
        deadline = time.monotonic() + 60
        while not _leader_held(url):  # the first replica's scheduler takes the lock
            assert time.monotonic() < deadline, "no replica took the scheduler's lock"
            await asyncio.sleep(0.2)
        other, other_address = _start_replica(tmp_path, "b", url, executor_address)
        procs.append(other)
        b = await _serving(other, other_address, tmp_path / "control-a" / "admin-token")
        clients.append(b)

        # a job queued through the other replica is placed by the leader
        first = await b.submit_custom("#!/usr/bin/env bash\necho first\n")
        assert (await b.wait(first.job_id, st.JOB_STATE_SUCCEEDED, timeout=120)).state == st.JOB_STATE_SUCCEEDED
        assert _dispatched_by(url, first.job_id) == {leader_address}

        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(30)
        second = await b.submit_custom("#!/usr/bin/env bash\necho second\n")
        done = await b.wait(second.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
        assert _dispatched_by(url, second.job_id) == {other_address}
    finally:
        for c in clients:
            await c.channel.close(None)
        for proc in procs:
            embedded.stop_process(proc)
        embedded.stop_process(executor)
        drop_pg_database(url)
