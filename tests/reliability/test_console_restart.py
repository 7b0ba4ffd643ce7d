"""The console restarts while a job reports metrics and logs, and while `sf job logs -f` follows it.
Afterwards every step and every log line is stored exactly once, and the follower printed every
line exactly once (the capsule buffered on disk and resent; the follower resumed after its cursor).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys

import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from control.app import start_control
from control.telemetry import metrics
from tests.integration.console import console
from tests.ports import free_port

STEPS = 120
TRAIN = f"""#!/usr/bin/env bash
python3 - <<'PY'
import time, starforge
for step in range(1, {STEPS} + 1):
    starforge.report(step=step, loss=1.0 / step)
    print(f"line {{step}}", flush=True)
    time.sleep(0.05)
PY
"""


@pytest.mark.parametrize("ingest_port", [False, True], ids=["listen", "ingest-port"])
async def test_console_restart_loses_and_duplicates_nothing(tmp_path: pathlib.Path, ingest_port: bool) -> None:
    """With `ingest_port` the capsule reports on the console's ingest port (`ingest_listen`), whose
    open streams the stop breaks and which comes back on the same address."""
    listen = f"127.0.0.1:{free_port()}"
    ingest_listen = f"127.0.0.1:{free_port()}" if ingest_port else ""
    async with console(tmp_path, listen=listen, ingest_listen=ingest_listen) as c:
        job = await c.submit_custom(TRAIN)
        await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=30)
        env = dict(
            os.environ,
            STARFORGE_CONSOLE=c.address,
            STARFORGE_TOKEN=c.token,
            STARFORGE_CLIENT_CONFIG=str(tmp_path / "c.yaml"),
        )
        follower = subprocess.Popen(
            [str(pathlib.Path(sys.executable).parent / "sf"), "job", "logs", job.job_id, "-f", "-n", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while True:  # let some lines through before the restart
            r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job.job_id), metadata=c.md)
            if any(p.step >= 20 for s in r.series for p in s.points):
                break
            await asyncio.sleep(0.1)

        cfg = c.app.ctx.cfg
        await c.app.stop(0)  # the console goes away mid-job ...
        await asyncio.sleep(2.0)  # ... long enough for the capsule to journal lines it cannot send
        c.app = await start_control(cfg)  # and comes back on the same address and state

        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED
        if ingest_port:
            assert c.app.ctx.public_ingest_address == ingest_listen != c.address
        out, err = await asyncio.to_thread(follower.communicate, timeout=60)
        assert follower.returncode == 0, err

        r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job.job_id, names=["loss"]), metadata=c.md)
        steps = [p.step for s in r.series for p in s.points]
        assert steps == list(range(1, STEPS + 1))
        stored = await c.app.ctx.db.run(lambda s: metrics.count(s, job.job_id))
        assert stored == STEPS, "a resent batch must not be stored twice"
        lines = [ln for ln in await c.logs(job.job_id) if ln.startswith("line ")]
        assert lines == [f"line {i}" for i in range(1, STEPS + 1)]
        printed = [ln for ln in out.splitlines() if ln.startswith("line ")]
        assert printed == [f"line {i}" for i in range(1, STEPS + 1)]
