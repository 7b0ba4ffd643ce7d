"""Two control plane replicas on one PostgreSQL share the queue: every job runs, none twice.

Both replicas run their schedulers at once; job rows are claimed with FOR UPDATE SKIP LOCKED, so
each job becomes exactly one attempt, launched once — checked from the executor's own records.
Replicas share the blob directory (as they would share NFS or an object store in a deployment).
"""

from __future__ import annotations

import dataclasses
import pathlib

from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_state_pb2 as st

from control.app import start_control
from tests.db import create_pg_database, drop_pg_database
from tests.integration.console import console

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
                assert claimed_by == {c.app.address, twin.address}, "both replicas should have dispatched jobs"
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
