"""A launch the executor refuses for lack of room ("no room": all its slots in use) is sent again
once a slot frees, without counting as a failure of the job.

The control plane counts a slot free when it sees an attempt end (its capsule reports the end);
the executor only once it has reaped the process, a moment later. With one slot and quick jobs
submitted at once, nearly every launch after the first reaches a full executor. The re-send used
to wait for the reconciler to observe the attempt and find it missing; nothing woke the
reconciler after such a refusal, so the job stayed SUBMITTED until its next periodic pass (here
an hour away: in the benchmark that found it, the console sat idle with one job SUBMITTED). The
scheduler re-sends a refused launch on its own backoff schedule now."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from tests.integration.console import console

pytestmark = pytest.mark.usefixtures("ledger")

JOBS = 6


async def test_quick_jobs_on_one_slot_all_run_despite_refused_launches(tmp_path: pathlib.Path) -> None:
    async with console(
        tmp_path,
        local={"inventory": [{"series": "cpu", "gpus": 0, "slots": 1}]},
        inventory=[InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=1)],
        reconcile_interval_seconds=3600.0,  # only a notification wakes the reconciler
    ) as c:
        submitted = await asyncio.gather(*(c.submit_custom("#!/usr/bin/env bash\ntrue\n") for _ in range(JOBS)))
        done = [await c.wait(j.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120) for j in submitted]
        assert [j.state for j in done] == [st.JOB_STATE_SUCCEEDED] * JOBS, done
        # every job ran on its first attempt: a refused launch is no failure of the job
        assert all(len(j.attempts) == 1 for j in done), done
