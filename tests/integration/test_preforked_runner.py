"""The pre-forked runner of the process runtime with job uids (executor_svc/local/zygote.py) under
the failures it must survive: its executor killed with an attempt running, and the zygote itself
killed. One fork per attempt: the attempt's runner is the zygote's own child, and the zygote
writes its exit code. Real executor processes, real forks, jobs as their own uids (the suite runs
as root).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import time
from typing import Any

from starforge_api.job.v1 import job_state_pb2 as st

from control import embedded
from executor_svc.local.process_runtime import _proc_stat
from tests.integration.console import start_executor_process
from tests.security.isolation_support import (
    PROC_READERS,
    attempt_dir,
    finish,
    isolated_console,
    out_dir,
    read_json,
    wait_file,
)

# Reports the runner (train.sh's parent), its parent (the zygote, or the `sh` wrapper of an attempt
# started the usual way) and their command lines, then waits for `release`.
WAITING = (
    r"""#!/bin/sh
python3 - "$FORGE_OUT_DIR/parents.json" "$PPID" <<'PY'
import json, sys
"""
    + PROC_READERS
    + r"""
runner = int(sys.argv[2])
above = parent(runner)
json.dump(
    {"runner": runner, "runner_cmdline": cmdline(runner), "parent": above, "parent_cmdline": cmdline(above)},
    open(sys.argv[1], "w"),
)
PY
while [ ! -e "$FORGE_OUT_DIR/release" ]; do sleep 0.1; done
echo released
"""
)


def _reaped(pid: int) -> bool:
    """No such process any more: not even a zombie waiting for its parent."""
    return not pathlib.Path(f"/proc/{pid}").exists()


def _forked(parents: dict[str, Any]) -> bool:
    """The runner is a fork of a zygote (the venv's entry, its parent), not under `sh -c`."""
    cmdline = parents["parent_cmdline"]
    is_zygote = len(cmdline) == 3 and cmdline[1] == "-I" and pathlib.Path(cmdline[2]).name == "pex"
    return is_zygote and parents["runner_cmdline"] == cmdline


def _gone(pid: int) -> bool:
    fields = _proc_stat(pid)
    return fields is None or fields[0] in ("Z", "X")


async def _until(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_forked_attempt_outlives_its_executor_and_the_next_executor_finishes_it() -> None:
    async with isolated_console() as c:
        first = await c.submit_custom(WAITING)
        out = out_dir(c, first.job_id)
        await wait_file(out / "parents.json", c, first.job_id)
        parents = read_json(out / "parents.json")
        zygote, runner = parents["parent"], parents["runner"]
        assert _forked(parents), parents
        attempt = attempt_dir(c, first.job_id)
        record = read_json(attempt / "attempt.json")
        assert record["pid"] == runner, record

        assert c.executor is not None
        c.executor.send_signal(signal.SIGKILL)  # our own child, by its pid
        c.executor.wait()
        await asyncio.sleep(0.5)
        # the zygote saw its input end: it forks no more, but stays for the attempt it runs
        assert not _gone(zygote) and not _gone(runner)

        host, _, port = c.executor_address.rpartition(":")
        config = c.root / "executor.yaml"
        proc, _ = await asyncio.to_thread(start_executor_process, c.root, config, "local", f"{host}:{port}")
        try:
            (out / "release").touch()
            done = await finish(c, first.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(first.job_id)
            assert len(done.attempts) == 1, done  # found again, not launched a second time
            assert "released" in "\n".join(await c.logs(first.job_id))
            # the old zygote wrote the attempt's exit code, reaped it, and left
            await _until(lambda: _reaped(zygote))
            assert (attempt / "exit_code").read_text() == "0\n"
            assert _reaped(runner)

            # the new executor forks the next attempt from a zygote of its own
            second = await c.submit_custom(WAITING)
            await wait_file(out_dir(c, second.job_id) / "parents.json", c, second.job_id)
            again = read_json(out_dir(c, second.job_id) / "parents.json")
            assert _forked(again) and again["parent"] != zygote and not _gone(again["parent"]), again
            (out_dir(c, second.job_id) / "release").touch()
            done = await finish(c, second.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(second.job_id)
        finally:
            embedded.stop_process(proc)


async def test_a_killed_zygote_is_replaced_and_a_stuck_one_costs_only_the_usual_start() -> None:
    async with isolated_console() as c:
        first = await c.submit_custom(WAITING)
        await wait_file(out_dir(c, first.job_id) / "parents.json", c, first.job_id)
        zygote = read_json(out_dir(c, first.job_id) / "parents.json")["parent"]
        os.kill(zygote, signal.SIGKILL)  # the test runs as root; the zygote is the executor's
        await _until(lambda: _reaped(zygote))  # and the executor has seen it end
        (out_dir(c, first.job_id) / "release").touch()
        done = await finish(c, first.job_id)
        # its runner lived on and reported its own end (no zygote was left to write the exit code)
        assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(first.job_id)

        # killed: the next launch starts a new zygote
        second = await c.submit_custom(WAITING)
        await wait_file(out_dir(c, second.job_id) / "parents.json", c, second.job_id)
        parents = read_json(out_dir(c, second.job_id) / "parents.json")
        assert _forked(parents), parents
        replaced = parents["parent"]
        assert replaced != zygote and not _gone(replaced)
        assert c.executor is not None
        fields = _proc_stat(replaced)
        assert fields is not None and int(fields[1]) == c.executor.pid  # the executor's child, stopped below
        (out_dir(c, second.job_id) / "release").touch()
        assert (await finish(c, second.job_id)).state == st.JOB_STATE_SUCCEEDED

        # stuck: the fork is not answered, the zygote is killed, and the attempt (whose spec no
        # wrapper took) starts through bootstrap.sh instead; no second copy of it runs
        os.kill(replaced, signal.SIGSTOP)
        third = await c.submit_custom(WAITING)
        out = out_dir(c, third.job_id)
        await wait_file(out / "parents.json", c, third.job_id)
        parents = read_json(out / "parents.json")
        assert parents["parent_cmdline"][:2] == ["sh", "-c"], parents
        await _until(lambda: _gone(replaced))
        (out / "release").touch()
        done = await finish(c, third.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(third.job_id)
        assert "\n".join(await c.logs(third.job_id)).count("released") == 1
        assert not list((c.root / "executor" / "zygote").iterdir())  # its spec was taken back


async def test_a_runner_killed_outright_ends_with_the_exit_code_its_zygote_wrote() -> None:
    """Killed by SIGKILL, the runner reports nothing: the attempt ends from the executor's
    observation, whose exit code is the one the zygote (its parent, root) wrote from the kernel's
    status, 128 + 9 as `sh` would say it."""
    async with isolated_console() as c:
        job = await c.submit_custom(WAITING)
        out = out_dir(c, job.job_id)
        await wait_file(out / "parents.json", c, job.job_id)
        parents = read_json(out / "parents.json")
        assert _forked(parents), parents
        os.kill(parents["runner"], signal.SIGKILL)  # the test runs as root
        done = await finish(c, job.job_id)
        assert done.state == st.JOB_STATE_FAILED, done
        first = done.attempts[0]
        assert first.HasField("exit_code") and first.exit_code == 128 + signal.SIGKILL, first
        assert not _gone(parents["parent"])  # the zygote stays for the next attempts
