"""Helpers for the Slurm tests: wait for a job to reach a ledger state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.slurm import SlurmClient, SlurmJob, job_ledger_state

TERMINAL = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)


async def wait_for_state(
    client: SlurmClient, job_id: int, states: Collection[int] = TERMINAL, timeout: float = 30.0
) -> SlurmJob:
    """Poll until the job's ledger state is one of `states`; fail with what was seen last."""
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = await client.get_job(job_id)
        if job is not None and job_ledger_state(job).state in states:
            return job
        await asyncio.sleep(0.2)
    pytest.fail(f"job {job_id} did not reach {sorted(states)} within {timeout:.0f} s; last seen: {job}")
