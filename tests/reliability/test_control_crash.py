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
import time

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel
from control.db import models as m
from control.db.engine import Database
from tests.integration.console import Console, executor_yaml, start_executor_process
from tests.reliability.harness import ControlProcess

JOBS = 200
KILLS = 10


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
            app=None,  # type: ignore[arg-type]
            token=token,
            root=tmp_path,
            executor=executor,
            executor_address=executor_address,
            channel=channel,
        )
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
