"""The control plane is SIGKILLed at random points while it dispatches 200 jobs (at least 10 kills),
and restarted each time. Afterwards every job reached a terminal state exactly once and no attempt
was launched twice — checked from the executor's own records, not the ledger's word.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time

import grpc
import pytest
import yaml
from starforge.control.v1 import control_service_pb2 as ctl
from starforge.job.v1 import job_state_pb2 as st

from common.channel import aio_channel
from control.db import models as m
from control.db.engine import Database
from control.embedded import ensure_capsule
from tests.integration.console import Console, executor_yaml, start_executor_process

JOBS = 200
KILLS = 10
REPO = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlProcess:
    """`starforge-control` as a real process we can SIGKILL."""

    def __init__(self, root: pathlib.Path, executor_address: str) -> None:
        self.root = root
        self.port = _free_port()
        self.config = root / "control.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "listen": f"127.0.0.1:{self.port}",
                    "state_dir": str(root / "console"),
                    "capsule_dir": str(ensure_capsule()),
                    "bootstrap_admin": "admin",
                    "default_images": {"custom": "host"},
                    "scheduler_interval_seconds": 0.05,
                    "reconcile_interval_seconds": 0.3,
                    "fleets": [
                        {
                            "name": "local",
                            "kind": "local",
                            "address": executor_address,
                            "inventory": [{"series": "cpu", "nodes": 1, "gpus_per_node": 0, "slots": 8}],
                        }
                    ],
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.root / "control.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control.main", "--config", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("control plane died: " + (self.root / "control.log").read_text()[-3000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("control plane did not listen")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_sigkill_during_dispatch_loses_nothing_and_launches_nothing_twice(tmp_path: pathlib.Path) -> None:
    executor, executor_address = start_executor_process(
        tmp_path, executor_yaml(tmp_path, "process", {"inventory": [{"series": "cpu", "gpus": 0, "slots": 8}]})
    )
    control = ControlProcess(tmp_path, executor_address)
    control.start()
    try:
        token = (tmp_path / "console" / "admin-token").read_text().strip()
        channel = aio_channel(control.address)
        c = Console(
            app=None, token=token, root=tmp_path, executor=executor, executor_address=executor_address, channel=channel
        )  # type: ignore[arg-type]
        # one upload, then 200 submissions of the same small lab
        first = await c.submit_custom("#!/usr/bin/env bash\necho run $FORGE_ATTEMPT_ID\n", experiment="e")
        spec = (await c.get(first.job_id)).spec
        job_ids = [first.job_id]
        for i in range(1, JOBS):
            r = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=f"r{i}"), metadata=c.md)
            job_ids.append(r.job.job_id)
        # kill at random points while it dispatches
        rng = random.Random(7)
        kills = 0
        while kills < KILLS:
            await asyncio.sleep(rng.uniform(0.1, 1.2))
            control.kill()
            kills += 1
            await channel.close(None)
            control.start()
            channel = aio_channel(control.address)
            c.channel = channel
        # let it finish
        deadline = time.monotonic() + 600
        while True:
            try:
                r = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=1000), metadata=c.md, timeout=30)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)
                continue
            states = [j.state for j in r.jobs]
            if len(states) == JOBS and all(
                s in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED) for s in states
            ):
                break
            assert time.monotonic() < deadline, f"not done: {sorted(set(states))}"
            await asyncio.sleep(1.0)
        await channel.close(None)
    finally:
        control.stop()
    assert kills >= 10
    assert sorted(j.job_id for j in r.jobs) == sorted(job_ids)
    assert all(j.state == st.JOB_STATE_SUCCEEDED for j in r.jobs), [
        (j.job_id, j.state, j.diagnosis.summary) for j in r.jobs if j.state != st.JOB_STATE_SUCCEEDED
    ]
    # exactly one terminal event per job in the ledger
    db = Database(f"sqlite:///{tmp_path / 'console' / 'ledger.db'}")
    try:
        terminal = db.run_sync(
            lambda s: [
                e.job_id
                for e in s.query(m.JobEvent).filter(
                    m.JobEvent.to_state.in_([st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED])
                )
            ]
        )
    finally:
        db.close()
    assert sorted(terminal) == sorted(job_ids)
    # the executor's own records: one attempt per job, each started once
    attempts = sorted(p.name for p in (tmp_path / "executor" / "attempts").iterdir())
    assert len(attempts) == JOBS, f"{len(attempts)} attempts on the executor for {JOBS} jobs"
    assert sorted(a.rsplit(".", 1)[0] for a in attempts) == sorted(job_ids)
    for a in attempts:
        log = (tmp_path / "executor" / "attempts" / a / "bootstrap.log").read_text()
        assert log.count(f"run {a}") == 1, f"{a} ran {log.count(f'run {a}')} times"
    from control.embedded import stop_process

    stop_process(executor)
    assert os.path.exists(tmp_path / "console" / "ledger.db")
    assert json
