"""The test console leaves nothing running: a job still running when a test ends (its attempt runs
in a session of its own, to outlive an executor restart) is ended with the console, by the pids the
executor recorded, not left to drain towards a console that is gone."""

from __future__ import annotations

import asyncio
import pathlib
import time

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import console

SLEEPER = '#!/usr/bin/env bash\necho $$ > "$FORGE_OUT_DIR/pid"\nexec sleep 600\n'


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def test_a_job_still_running_when_the_test_ends_is_ended_with_its_console(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom(SLEEPER)
        await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=60)
        pid_file = tmp_path / "executor" / "out" / job.job_id / "pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the job never wrote its pid"
            await asyncio.sleep(0.1)
        pid = int(pid_file.read_text())
        assert _alive(pid)
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, f"the job's process {pid} outlived its console"
        await asyncio.sleep(0.1)
