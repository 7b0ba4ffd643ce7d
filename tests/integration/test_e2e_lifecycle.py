"""The lifecycle at the API level: stop, exit code 3, tampered capsule, logs after the process is gone."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import time

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console

# Console-level: each test runs with its ledger on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("ledger")

SLEEPER = """#!/usr/bin/env bash
echo started
python3 -c 'import time
for i in range(600):
    print("tick", i, flush=True); time.sleep(0.2)'
"""


def _session_members(sid: int) -> list[int]:
    """PIDs whose session id is `sid` (the executor starts each attempt in its own session)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _attempt_record(c: Console, attempt_id: str) -> dict:  # type: ignore[type-arg]
    record: dict[str, object] = json.loads((c.root / "executor" / "attempts" / attempt_id / "attempt.json").read_text())
    return record


async def test_stop_ends_stopped_and_kills_every_process(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom(SLEEPER)
        running = await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=30)
        attempt_id = running.attempts[-1].attempt_id
        pid = int(_attempt_record(c, attempt_id)["pid"])
        deadline = time.monotonic() + 60
        while not any("tick" in ln for ln in await c.logs(job.job_id)):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert _session_members(pid), "the job should be running"
        from starforge_api.control.v1 import control_service_pb2 as ctl

        await c.jobs.StopJob(ctl.StopJobRequest(job_id=job.job_id), metadata=c.md)
        stopped = await c.wait(job.job_id, st.JOB_STATE_STOPPED, st.JOB_STATE_FAILED, timeout=30)
        assert stopped.state == st.JOB_STATE_STOPPED
        assert stopped.attempts[-1].state == st.JOB_STATE_STOPPED
        deadline = time.monotonic() + 10
        while _session_members(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _session_members(pid) == [], "no process of the stopped job may survive"


IGNORES_TERM = "#!/usr/bin/env bash\ntrap '' TERM\necho $$ > \"$FORGE_OUT_DIR/pid\"\necho ready\nexec sleep 600\n"


async def test_stop_kills_a_command_that_ignores_sigterm(tmp_path: pathlib.Path) -> None:
    """The command runs in a session of its own (the runner's); SIGTERM is ignored, so the runner's
    SIGKILL after the grace is what ends it, and the executor must not kill the runner first."""
    async with console(tmp_path) as c:
        job = await c.submit_custom(IGNORES_TERM)
        await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=30)
        deadline = time.monotonic() + 60
        while not any("ready" in ln for ln in await c.logs(job.job_id)):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        pid = int((c.root / "executor" / "out" / job.job_id / "pid").read_text())
        assert _session_members(pid) == [pid]
        from starforge_api.control.v1 import control_service_pb2 as ctl

        await c.jobs.StopJob(ctl.StopJobRequest(job_id=job.job_id), metadata=c.md)
        stopped = await c.wait(job.job_id, st.JOB_STATE_STOPPED, st.JOB_STATE_FAILED, timeout=60)
        assert stopped.state == st.JOB_STATE_STOPPED
        deadline = time.monotonic() + 10
        while _session_members(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _session_members(pid) == [], "the command outlived its stopped job"


async def test_exit_code_3_fails_with_the_code(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom("#!/usr/bin/env bash\necho about to fail >&2\nexit 3\n")
        done = await c.wait(job.job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=30)
        assert done.state == st.JOB_STATE_FAILED
        assert done.attempts[-1].exit_code == 3
        assert done.diagnosis.exit_code == 3
        assert done.diagnosis.summary == "train.sh exited with code 3"
        assert done.diagnosis.failure_class == st.FAILURE_CLASS_USER_CODE
        assert "about to fail" in list(done.diagnosis.log_tail)


async def test_tampered_capsule_refuses_to_start(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        first = await c.submit_custom("#!/usr/bin/env bash\necho fine\n")
        await c.wait(first.job_id, st.JOB_STATE_SUCCEEDED, timeout=30)
        # Corrupt the executor's cached copy of the runner (a bad disk, a tampering hand): the
        # executor re-verifies its cache entries before a launch and refuses (bootstrap.sh would
        # refuse too, if a file changed after that check).
        manifest = json.loads((c.app.ctx.cfg.capsule_dir / "manifest.json").read_text())
        digest = manifest["runner"]["sha256"]
        cached = sorted((c.root / "executor" / "blobs" / digest[:2]).glob(digest + "*"))
        assert cached, "the first job should have cached the runner"
        for path in cached:  # the blob and its executable twin
            mode = path.stat().st_mode
            path.chmod(0o644)
            path.write_bytes(path.read_bytes() + b"# tampered\n")
            path.chmod(mode)
        job = await c.submit_custom("#!/usr/bin/env bash\necho must not run\n")
        done = await c.wait(job.job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=30)
        assert done.state == st.JOB_STATE_FAILED
        assert done.diagnosis.failure_class == st.FAILURE_CLASS_PRECHECK
        assert "the executor refused the launch" in done.diagnosis.summary
        assert manifest["runner"]["path"] in done.diagnosis.summary
        assert "nothing of this attempt ran" in done.diagnosis.summary
        lines = await c.logs(job.job_id)
        assert "must not run" not in lines


async def test_logs_outlive_the_process(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        job = await c.submit_custom("#!/usr/bin/env bash\nfor i in $(seq 1 300); do echo line $i; done\n")
        await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, timeout=30)
        attempt_id = (await c.get(job.job_id)).attempts[-1].attempt_id
        workspace = c.root / "executor" / "attempts" / attempt_id / "workspace"
        deadline = time.monotonic() + 15
        while workspace.exists() and time.monotonic() < deadline:  # the reconciler cleans up
            await asyncio.sleep(0.1)
        assert not workspace.exists(), "cleanup should have removed the attempt's files"
        lines = [ln for ln in await c.logs(job.job_id) if ln.startswith("line ")]
        assert lines == [f"line {i}" for i in range(1, 301)]
