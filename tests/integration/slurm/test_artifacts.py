"""Artifacts on the Slurm kind: the job runs in the test cluster and writes FORGE_OUT_DIR on the
shared file system; the Slurm executor process streams it to `sf job artifacts` / `sf job
download` through the console (real slurmctld, slurmd, slurmrestd, executor and capsule)."""

from __future__ import annotations

import json
import pathlib

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.artifacts_support import WRITE_ARTIFACTS, check_download, check_listing
from tests.integration.backends.slurm import ClusterInfo

from .test_e2e import diagnose, slurm_console

pytestmark = pytest.mark.slurm


async def test_slurm_artifacts_list_download_resume(tmp_path: pathlib.Path, slurm_cluster: ClusterInfo) -> None:
    async with slurm_console(tmp_path, slurm_cluster) as c:  # type: ignore[attr-defined]
        lab = await c.lab("exp", WRITE_ARTIFACTS)
        r = await c.sf_async("-o", "json", "submit", "exp", "--profile", "h100:1", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=240)
        assert done.state == st.JOB_STATE_SUCCEEDED, diagnose(c, done)
        out_dir = pathlib.Path(slurm_cluster.staging_dir) / f"e2e-{tmp_path.name}" / "out" / job_id
        await check_listing(c.sf_async, job_id, out_dir)
        await check_download(c.sf_async, job_id, out_dir, tmp_path / "dl")
