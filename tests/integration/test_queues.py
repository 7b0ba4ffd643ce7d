"""`sf submit --queue`: a named queue the scheduler respects, checked against the console's queues."""

from __future__ import annotations

import json
import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import console


async def test_queue_runs_on_a_fleet_that_serves_it_and_unknown_is_refused(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, queues=["night", "default"]) as c:
        lab = await c.lab("exp")
        r = await c.sf_async("-o", "json", "submit", "exp", "--queue", "night", cwd=lab)
        job = json.loads(r.stdout)["job"]
        assert job["spec"]["queue"] == "night"
        done = await c.wait(job["job_id"], st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=60)
        assert done.state == st.JOB_STATE_SUCCEEDED
        await c.sf_async("submit", "exp", cwd=lab)  # the default queue
        bad = await c.sf_async("submit", "exp", "--queue", "nope", cwd=lab, check=False)
        assert bad.returncode == 3, bad.stdout + bad.stderr
        assert "unknown queue 'nope'; this console's queues: default, night" in bad.stderr
        assert "Traceback" not in bad.stderr
        jobs = json.loads((await c.sf_async("-o", "json", "job", "ls")).stdout)
        listed = jobs["jobs"] if isinstance(jobs, dict) else jobs
        assert len(listed) == 2


async def test_a_fleet_with_queues_does_not_take_the_default_queue(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, queues=["night"]) as c:
        lab = await c.lab("exp")
        r = await c.sf_async("submit", "exp", cwd=lab, check=False)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "no fleet serves the default queue; pass --queue; this console's queues: night" in r.stderr
        ok = await c.sf_async("-o", "json", "submit", "exp", "--queue", "night", cwd=lab)
        job_id = json.loads(ok.stdout)["job"]["job_id"]
        await c.wait(job_id, st.JOB_STATE_SUCCEEDED, timeout=60)
