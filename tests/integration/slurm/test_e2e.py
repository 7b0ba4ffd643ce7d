"""End to end through `sf` on a Slurm fleet: the control plane in this process, a real
`starforge-executor --kind slurm` process, the real capsule (bootstrap.sh + runner.pex) running in
the test cluster's chroot and streaming its logs back to the control plane on 127.0.0.1.

On a failure look at: <tmp>/executor.log (the executor), the attempt's staged files under the
cluster's staging dir (job.sh, job.log, outcome), and the cluster's logs (slurmctld.log, slurmd-*.log).
"""

from __future__ import annotations

import pathlib
import re
import time

import pytest
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from executor_svc.slurm.images import NO_CONTAINER
from tests.integration.backends.slurm import ClusterInfo
from tests.integration.console import Console, console

from .executor_fixtures import slurm_section

pytestmark = pytest.mark.slurm

HELLO = """#!/usr/bin/env bash
echo "hello from train.sh on $SLURMD_NODENAME with GPUs $CUDA_VISIBLE_DEVICES"
"""
SLEEPER = """#!/usr/bin/env bash
echo started
while true; do sleep 0.2; done
"""


def slurm_console(tmp_path: pathlib.Path, info: ClusterInfo) -> object:
    section = slurm_section(info, pathlib.Path(info.staging_dir) / f"e2e-{tmp_path.name}")
    return console(
        tmp_path,
        kind="slurm",
        local=section,
        inventory=[InventoryConfig(series="h100", nodes=2, gpus_per_node=4)],
    )


def diagnose(c: Console, job: job_pb2.Job | None = None) -> str:
    """What to read when an e2e assertion fails."""
    text = f"\nexecutor log: {c.root / 'executor.log'}\n" + (c.root / "executor.log").read_text()[-3000:]
    if job is not None:
        text += f"\njob: {job}"
    return text


async def submit(c: Console, lab: pathlib.Path, *args: str) -> str:
    r = await c.sf_async("submit", "exp", *args, cwd=lab)
    found = re.search(r"submitted job (j[0-9a-z]+)", r.stdout)
    assert found, r.stdout + r.stderr
    return found[1]


async def wait_for_line(c: Console, job_id: str, text: str, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = await c.logs(job_id)
        if any(text in line for line in lines):
            return lines
        assert time.monotonic() < deadline, f"no {text!r} in the logs of {job_id}: {lines}" + diagnose(c)
        await __import__("asyncio").sleep(0.3)


async def test_sf_submit_runs_on_slurm_and_its_logs_reach_the_console(
    tmp_path: pathlib.Path, slurm_cluster: ClusterInfo
) -> None:
    async with slurm_console(tmp_path, slurm_cluster) as c:  # type: ignore[attr-defined]
        lab = await c.lab("exp", HELLO)
        job_id = await submit(c, lab, "--profile", "h100:2")
        try:
            await c.wait(job_id, st.JOB_STATE_RUNNING, st.JOB_STATE_SUCCEEDED, timeout=120)
            done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        except AssertionError as exc:
            raise AssertionError(str(exc) + diagnose(c)) from None
        assert done.state == st.JOB_STATE_SUCCEEDED, diagnose(c, done)
        attempt = done.attempts[-1]
        assert attempt.fleet == "slurm"
        assert attempt.backend_handle.isdigit(), attempt  # the Slurm job id
        # No container on this fleet: the provenance says so instead of leaving the digest empty.
        assert done.provenance.image_digest == NO_CONTAINER, done.provenance
        lines = await c.logs(job_id)
        hello = [ln for ln in lines if ln.startswith("hello from train.sh on ")]
        assert hello, f"{lines}" + diagnose(c, done)
        assert re.fullmatch(r"hello from train\.sh on n[12] with GPUs [0-3],[0-3]", hello[0]), hello


async def test_sf_job_stop_cancels_the_slurm_job(tmp_path: pathlib.Path, slurm_cluster: ClusterInfo) -> None:
    async with slurm_console(tmp_path, slurm_cluster) as c:  # type: ignore[attr-defined]
        lab = await c.lab("exp", SLEEPER)
        job_id = await submit(c, lab, "--profile", "h100:1")
        await c.wait(job_id, st.JOB_STATE_RUNNING, timeout=120)
        await wait_for_line(c, job_id, "started", timeout=60)
        await c.sf_async("job", "stop", job_id)
        stopped = await c.wait(job_id, st.JOB_STATE_STOPPED, st.JOB_STATE_FAILED, timeout=60)
        assert stopped.state == st.JOB_STATE_STOPPED, diagnose(c, stopped)
        assert stopped.attempts[-1].state == st.JOB_STATE_STOPPED
