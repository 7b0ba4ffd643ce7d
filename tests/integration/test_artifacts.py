"""`sf job artifacts` and `sf job download` on the local kind (a real executor process, the
process runtime): a job writes FORGE_OUT_DIR, the listing matches the disk, downloads of all, a
prefix and one file arrive intact, and an interrupted download resumes. (Agent:
tests/integration/forgelet/test_artifacts.py; Slurm: tests/integration/slurm/test_artifacts.py.)"""

from __future__ import annotations

import json
import pathlib

from starforge.job.v1 import job_state_pb2 as st

from tests.integration.artifacts_support import WRITE_ARTIFACTS, check_download, check_listing
from tests.integration.console import console


async def test_local_artifacts_list_download_resume(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path / "c") as c:
        lab = await c.lab("arts", WRITE_ARTIFACTS)
        r = await c.sf_async("-o", "json", "submit", "arts", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(job_id)
        out_dir = c.root / "executor" / "out" / job_id
        await check_listing(c.sf_async, job_id, out_dir)
        await check_download(c.sf_async, job_id, out_dir, tmp_path / "dl")
