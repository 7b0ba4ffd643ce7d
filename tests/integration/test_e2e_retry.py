"""`sf job retry` of a FAILED and of a STOPPED job: the same run id resumes from its checkpoint."""

from __future__ import annotations

import asyncio
import json
import pathlib
import time

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console

# A training job that checkpoints its step in FORGE_OUT_DIR and, when FORGE_RESUME=1, goes on from
# the checkpoint. `mode` decides how the first attempt ends: "fail" after step 3, "wait" forever.
TRAINER = """#!/usr/bin/env bash
python3 - <<'PY'
import os, pathlib, sys, time
ckpt = pathlib.Path(os.environ["FORGE_OUT_DIR"]) / "checkpoint.txt"
start = 0
if os.environ.get("FORGE_RESUME") == "1" and ckpt.exists():
    start = int(ckpt.read_text())
    print(f"resumed from step {{start}}", flush=True)
else:
    print("fresh start", flush=True)
for step in range(start + 1, start + 4):
    ckpt.write_text(str(step))
    print(f"step {{step}}", flush=True)
if start == 0:
    if "{mode}" == "fail":
        sys.exit(1)
    while True:
        time.sleep(0.2)
print("done", flush=True)
PY
"""


async def _job(c: Console, job_id: str) -> dict:  # type: ignore[type-arg]
    data = json.loads((await c.sf_async("-o", "json", "job", "status", job_id)).stdout)
    return data.get("job", data)  # type: ignore[no-any-return]


async def _retry_resumes(c: Console, job_id: str) -> None:
    r = await c.sf_async("job", "retry", job_id)
    assert "retrying" in r.stdout + r.stderr
    done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
    assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
    job = await _job(c, job_id)
    assert job["job_id"] == job_id
    assert [a["number"] for a in job["attempts"]] == [1, 2]
    assert [a["attempt_id"] for a in job["attempts"]] == [f"{job_id}.1", f"{job_id}.2"]
    lines = await c.logs(job_id)
    assert "fresh start" in lines
    assert "resumed from step 3" in lines
    assert "done" in lines and "step 6" in lines


async def test_retry_a_failed_job_resumes_from_its_checkpoint(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", TRAINER.format(mode="fail"))
        submitted = json.loads((await c.sf_async("-o", "json", "submit", "exp", "--retries", "0", cwd=lab)).stdout)
        job_id = submitted["job"]["job_id"]
        failed = await c.wait(job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=60)
        assert failed.state == st.JOB_STATE_FAILED
        await _retry_resumes(c, job_id)


async def test_retry_a_stopped_job_resumes_from_its_checkpoint(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", TRAINER.format(mode="wait"))
        submitted = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)
        job_id = submitted["job"]["job_id"]
        deadline = time.monotonic() + 60
        while "step 3" not in await c.logs(job_id):
            assert time.monotonic() < deadline, "the job should have checkpointed step 3"
            await asyncio.sleep(0.2)
        await c.sf_async("job", "stop", job_id)
        stopped = await c.wait(job_id, st.JOB_STATE_STOPPED, st.JOB_STATE_FAILED, timeout=60)
        assert stopped.state == st.JOB_STATE_STOPPED
        await _retry_resumes(c, job_id)


async def test_retry_refuses_a_running_job(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", TRAINER.format(mode="wait"))
        job_id = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)["job"]["job_id"]
        await c.wait(job_id, st.JOB_STATE_RUNNING, timeout=60)
        r = await c.sf_async("job", "retry", job_id, check=False)
        assert r.returncode != 0
        assert "retry needs it FAILED or STOPPED" in r.stderr and "Traceback" not in r.stderr
        await c.sf_async("job", "stop", job_id)
        await c.wait(job_id, st.JOB_STATE_STOPPED, timeout=60)
