"""Pause releases the job's resources and keeps its checkpoint; resume continues the same run from
the latest checkpoint in FORGE_OUT_DIR (the step counter carries on, it does not restart at 0)."""

from __future__ import annotations

import asyncio
import pathlib
import time

import pytest
from sqlalchemy import func, select
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m
from tests.integration.console import console

# Console-level: each test runs with its ledger on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("ledger")

LAB = pathlib.Path(__file__).resolve().parents[2] / "tools" / "demo_lab"


async def test_pause_then_resume_continues_from_the_checkpoint(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom(
            "#!/usr/bin/env bash\nexec python3 experiments/exp/train.py\n",
            extra_files={"experiments/exp/train.py": (LAB / "train.py").read_bytes()},
            config={"steps": 200, "lr": 0.5, "step_seconds": 0.05, "checkpoint_every": 10},
        )
        await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=30)

        async def max_step() -> int:
            r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job.job_id, names=["loss"]), metadata=c.md)
            return max((p.step for s in r.series for p in s.points), default=0)

        deadline = time.monotonic() + 60
        while await max_step() < 40:
            if time.monotonic() > deadline:
                raise AssertionError(
                    "training did not progress; its log:\n" + "\n".join((await c.logs(job.job_id))[-30:])
                )
            await asyncio.sleep(0.2)

        await c.jobs.PauseJob(ctl.PauseJobRequest(job_id=job.job_id), metadata=c.md)
        paused = await c.wait(job.job_id, st.JOB_STATE_PAUSED, timeout=30)
        assert paused.attempts[-1].state == st.JOB_STATE_PAUSED
        reached = await max_step()
        checkpoints = sorted(
            int(p.stem.split("-")[1]) for p in pathlib.Path(paused.out_dir, "checkpoints").glob("step-*.npz")
        )
        assert checkpoints and checkpoints[-1] >= 40, checkpoints
        # GPUs/slots released: nothing of the job runs any more
        active = await c.app.ctx.db.run(
            lambda s: s.scalar(select(func.count()).select_from(m.Attempt).where(m.Attempt.state.in_([2, 3, 4])))
        )
        assert active == 0

        resumed = (await c.jobs.ResumeJob(ctl.ResumeJobRequest(job_id=job.job_id), metadata=c.md)).job
        assert resumed.job_id == job.job_id and resumed.state == st.JOB_STATE_QUEUED
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
        assert [a.number for a in done.attempts] == [1, 2]
        assert done.attempts[1].cause == 4  # ATTEMPT_CAUSE_RESUME
        lines = await c.logs(job.job_id)
        resume_line = next(ln for ln in lines if ln.startswith("resuming from"))
        start = int(resume_line.split("(step ")[1].rstrip(")"))
        assert start == checkpoints[-1]
        # the second attempt's first step is the one after the checkpoint, not step 1
        first_step_2 = await c.app.ctx.db.run(
            lambda s: s.scalar(
                select(func.min(m.MetricChunk.first_step)).where(
                    m.MetricChunk.job_id == job.job_id, m.MetricChunk.attempt_number == 2
                )
            )
        )
        assert first_step_2 == start + 1
        assert reached >= start
        steps = [int(ln.split()[1]) for ln in lines if ln.startswith("step ")]
        assert steps[-1] == 200
