"""`sf job artifacts` and `sf job download` on the local kind (a real executor process, the
process runtime): a job writes FORGE_OUT_DIR, the listing matches the disk, downloads of all, a
prefix and one file arrive intact, and an interrupted download resumes (from a partial file, and
after `sf` is killed mid-download). (Agent:
tests/integration/forgelet/test_artifacts.py; Slurm: tests/integration/slurm/test_artifacts.py.)"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from starforge_api.job.v1 import job_state_pb2 as st

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


BIG = 96 * 1024 * 1024
WRITE_BIG = f"""#!/usr/bin/env bash
set -eu
head -c {BIG} /dev/urandom > "$FORGE_OUT_DIR/big.bin"
"""


async def test_killed_download_resumes_where_it_stopped(tmp_path: pathlib.Path) -> None:
    """`sf job download` killed mid-file (the executor is frozen with SIGSTOP once bytes arrived, so
    the kill always lands before the end): the next run continues from the partial file's size."""
    async with console(tmp_path / "c") as c:
        assert c.executor is not None
        lab = await c.lab("big", WRITE_BIG)
        job_id = json.loads((await c.sf_async("-o", "json", "submit", "big", cwd=lab)).stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(job_id)
        source = c.root / "executor" / "out" / job_id / "big.bin"
        dest = tmp_path / "dl"
        part = dest / "big.bin.sfpart"
        env = dict(
            os.environ,
            STARFORGE_CONSOLE=c.address,
            STARFORGE_TOKEN=c.token,
            STARFORGE_CLIENT_CONFIG=str(c.root / "client.yaml"),
        )
        sf = str(pathlib.Path(sys.executable).parent / "sf")
        proc = subprocess.Popen(
            [sf, "job", "download", job_id, "big.bin", "--to", str(dest)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while not (part.exists() and part.stat().st_size > 0):
                assert proc.poll() is None, "sf ended before any byte arrived"
                assert time.monotonic() < deadline, "no byte of big.bin arrived"
                await asyncio.sleep(0.01)
            os.kill(c.executor.pid, signal.SIGSTOP)
            proc.kill()
            await asyncio.to_thread(proc.wait)
        finally:
            os.kill(c.executor.pid, signal.SIGCONT)
        partial = part.stat().st_size
        assert 0 < partial < BIG and not (dest / "big.bin").exists()
        assert part.read_bytes() == source.read_bytes()[:partial]

        r = await c.sf_async("-o", "json", "job", "download", job_id, "big.bin", "--to", str(dest))
        (fetched,) = json.loads(r.stdout)["files"]
        assert (fetched["status"], fetched["resumed_from"], fetched["size"]) == ("resumed", partial, BIG)
        assert hashlib.sha256((dest / "big.bin").read_bytes()).hexdigest() == fetched["sha256"]
        assert (dest / "big.bin").read_bytes() == source.read_bytes()
