"""One real job through every layer: gRPC submit -> scheduler -> executor process -> capsule -> ingest."""

from __future__ import annotations

import pathlib

from starforge.job.v1 import job_state_pb2 as st

from tests.integration.console import console

TRAIN = """#!/usr/bin/env bash
set -e
python3 - <<'PY'
import starforge, time
for step in range(1, 6):
    starforge.report(step=step, loss=1.0 / step)
    print(f"step {step}", flush=True)
PY
echo done
"""


async def test_job_runs_to_succeeded(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom(TRAIN)
        assert job.state == st.JOB_STATE_QUEUED
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=60)
        lines = await c.logs(job.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, (done, lines)
        assert [ln for ln in lines if ln.startswith("step ")] == [f"step {i}" for i in range(1, 6)]
        assert "done" in lines
