"""One real job through every layer: gRPC submit -> scheduler -> executor process -> capsule -> ingest."""

from __future__ import annotations

import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

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


async def test_prometheus_metrics(tmp_path: pathlib.Path) -> None:
    import httpx

    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        job = await c.submit_custom(TRAIN)
        await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, timeout=60)
        assert c.app.ops is not None
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{c.app.ops.port}/metrics")).text
        assert 'starforge_jobs{state="SUCCEEDED"} 1.0' in text
        assert 'starforge_submissions_total{outcome="admitted",reason=""}' in text
        assert 'starforge_dispatch_latency_seconds_count{fleet="local"}' in text
        assert 'starforge_ingest_records_total{kind="metrics"}' in text
        assert "starforge_queue_depth" in text


async def test_samples_reach_sf(tmp_path: pathlib.Path) -> None:
    script = """#!/usr/bin/env bash
python3 - <<'PY'
import starforge
for step in range(1, 4):
    starforge.sample(prompt=f"2+{step}=?", completion=str(2 + step), reward=1.0, step=step, source="gsm8k")
PY
"""
    async with console(tmp_path) as c:
        job = await c.submit_custom(script)
        await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, timeout=60)
        r = await c.sf_async("-o", "json", "job", "samples", job.job_id)
        import json

        samples = json.loads(r.stdout)["samples"]
        assert [(s["step"], s["prompt"], s["completion"], s["reward"]) for s in samples] == [
            ("3", "2+3=?", "5", 1.0),
            ("2", "2+2=?", "4", 1.0),
            ("1", "2+1=?", "3", 1.0),
        ]
        assert samples[0]["extra"] == {"source": "gsm8k"}
        text = (await c.sf_async("job", "samples", job.job_id)).stdout
        assert "2+3=?" in text and "REWARD" in text
