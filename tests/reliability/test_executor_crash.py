"""The executor service (`starforge-executor --kind local`, process runtime) is SIGKILLed at random
points while jobs are dispatched and run, and restarted each time on the same state dir and port.

The control plane retries launches that met a dead executor (UNAVAILABLE is transient) and
reconciles with the restarted one; the jobs of the process runtime run in their own sessions, keep
running and reporting while their executor is dead, and are found again by the new process.
Afterwards: every job succeeded in exactly one attempt and reached its terminal state once in the
ledger; the executor's own records hold one attempt per job, started once; every job's log lines
and metric points are stored exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import random
import signal
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m
from control.db.engine import Database
from control.executors import ExecutorPool
from control.ledger import state_machine as sm
from executor_svc.local.config import LocalConfig
from executor_svc.local.executor import LocalExecutor
from executor_svc.local.process_runtime import SPAWN_GRACE_SECONDS, _spawn
from executor_svc.local.records import AttemptDirs, AttemptRecord, Layout
from tests.reliability.harness import (
    ExecutorProcess,
    assert_all_succeeded_once,
    assert_launched_once,
    assert_reported_once,
    control_config,
    inprocess_console,
    reporting_train,
    submit_many,
    terminal_events,
    until,
    wait_terminal,
)

JOBS = 24
STEPS = 30
KILLS = 6


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_executor_sigkill_under_load_loses_nothing_and_launches_nothing_twice(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every other kill lands inside a Launch call (10 ms after the control plane sent it: the
    # executor is fetching blobs or spawning); the others at random moments.
    armed, fired = [False], asyncio.Event()
    real_launch = ExecutorPool.launch

    async def launch(self: ExecutorPool, fleet: str, request: lr.LaunchRequest) -> ex.LaunchResponse:
        if armed[0]:
            armed[0] = False
            asyncio.get_running_loop().call_later(0.01, fired.set)
        return await real_launch(self, fleet, request)

    monkeypatch.setattr(ExecutorPool, "launch", launch)
    executor = ExecutorProcess(tmp_path, slots=8)
    executor.start()
    cfg = control_config(tmp_path, executor.address, slots=8)
    try:
        async with inprocess_console(tmp_path, executor, cfg) as c:
            db = c.app.ctx.db
            running_at_kill: list[int] = []
            rng = random.Random(11)
            job_ids = await submit_many(c, JOBS, reporting_train(STEPS, 0.05))
            armed[0] = True
            for i in range(KILLS):
                if i % 2 == 0:
                    with contextlib.suppress(TimeoutError):  # no launch left to hit: kill anyway
                        await asyncio.wait_for(fired.wait(), 20)
                else:
                    await asyncio.sleep(rng.uniform(0.3, 3.0))
                executor.kill()
                running_at_kill.append(await _count(db, sm.RUNNING))
                await asyncio.sleep(rng.uniform(0.2, 1.5))  # dead for a while: launches and observes fail
                await asyncio.to_thread(executor.start)
                fired.clear()
                armed[0] = i % 2 == 1
            jobs = await wait_terminal(
                c.channel, c.token, job_ids, timeout=300, on_timeout=executor.log.read_text()[-3000:]
            )
            assert_all_succeeded_once(jobs)
            retried = await db.run(
                lambda s: s.scalar(select(func.count()).select_from(m.Attempt).where(m.Attempt.dispatch_tries > 0))
            )
            await assert_reported_once(c, db, job_ids, STEPS)
    finally:
        executor.stop()
    assert executor.starts == KILLS + 1
    # the kills hit launches in flight and running jobs (else this test proved little)
    assert retried, "no launch met a dead executor"
    assert any(running_at_kill), running_at_kill
    assert sorted(terminal_events(cfg.resolved_database_url)) == sorted(job_ids)
    assert_launched_once(executor.state_dir, job_ids)


async def test_a_capsule_spawned_just_before_the_executor_died_is_adopted_not_lost(tmp_path: pathlib.Path) -> None:
    """The executor saves the attempt's record, spawns the capsule, and dies before saving the
    record again with the pid. The next executor finds the capsule running (the wrapper wrote its
    own pid) instead of reporting the attempt lost, which would launch it a second time."""
    state = tmp_path / "executor"
    layout = Layout(state.resolve())
    dirs = layout.attempt("jadopt.1")
    for d in (dirs.capsule, dirs.workspace, dirs.scratch):
        d.mkdir(parents=True)
    (dirs.capsule / "bootstrap.sh").write_text("echo start jadopt.1\nsleep 60\n")
    record = AttemptRecord(
        "jadopt.1", "jadopt", 1, "process", "cpu", [], "n1", str(state / "out" / "jadopt"), time.time()
    )
    record.save(dirs.record)  # the save before the spawn: no pid yet
    child = _spawn(dirs.capsule, dirs.root, dirs.workspace, dirs.log, dict(os.environ))  # ... and then it died
    try:
        await until(lambda: _exists(dirs.root / "wrapper.pid"), timeout=10)
        fresh = LocalExecutor(LocalConfig(state_dir=state, runtime="process"))
        await fresh.recover()
        (obs,) = await fresh.observe(["jadopt.1"])
        assert (obs.state, obs.backend_handle) == (st.JOB_STATE_RUNNING, str(child.pid)), obs
        assert await fresh.stop("jadopt.1", 2)  # and it can stop what it adopted
        await until(lambda: _exists(dirs.exit_code), timeout=10)
        (obs,) = await fresh.observe(["jadopt.1"])
        assert obs.state == st.JOB_STATE_STOPPED, obs
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def _saved_before_spawn(state: pathlib.Path, attempt_id: str, *, age: float = 0.0) -> AttemptDirs:
    """An attempt whose record was saved `age` seconds ago, before its spawn (no pid): as an
    executor that died right after the save leaves it."""
    dirs = Layout(state.resolve()).attempt(attempt_id)
    for d in (dirs.capsule, dirs.workspace, dirs.scratch):
        d.mkdir(parents=True)
    (dirs.capsule / "bootstrap.sh").write_text(f"echo start {attempt_id}\nsleep 60\n")
    job_id = attempt_id.split(".", maxsplit=1)[0]
    record = AttemptRecord(
        attempt_id, job_id, 1, "process", "cpu", [], "n1", str(state / "out" / job_id), time.time() - age
    )
    record.save(dirs.record)
    return dirs


async def test_a_launch_that_died_before_its_spawn_is_started_afresh_not_failed(tmp_path: pathlib.Path) -> None:
    """Nothing was spawned after the save: the next executor answers that it has no such attempt
    (and forgets the record), so the control plane's re-sent launch starts the same attempt. Read
    as "never started, FAILED", it would have been retried as a second attempt."""
    state = tmp_path / "executor"
    dirs = _saved_before_spawn(state, "jnever.1", age=SPAWN_GRACE_SECONDS + 1)
    fresh = LocalExecutor(LocalConfig(state_dir=state, runtime="process"))
    await fresh.recover()
    (obs,) = await fresh.observe(["jnever.1"])
    assert obs.not_found, obs
    assert not dirs.record.exists()


async def test_a_wrapper_that_writes_its_pid_after_the_next_executor_looked_is_adopted(
    tmp_path: pathlib.Path,
) -> None:
    """The spawn happened, but the wrapper had not written `wrapper.pid` yet when the next
    executor looked (a loaded machine): it waits for it within the grace and adopts the attempt,
    instead of starting it again beside the running one."""
    state = tmp_path / "executor"
    dirs = _saved_before_spawn(state, "jlate.1")
    fresh = LocalExecutor(LocalConfig(state_dir=state, runtime="process"))
    looking = asyncio.ensure_future(fresh.recover())  # its first look at the attempts it finds
    await asyncio.sleep(1.0)
    assert not looking.done(), "it decided before the wrapper could write its pid"
    child = _spawn(dirs.capsule, dirs.root, dirs.workspace, dirs.log, dict(os.environ))  # the slow spawn
    try:
        await asyncio.wait_for(looking, SPAWN_GRACE_SECONDS + 5)
        assert "jlate.1" in fresh.pool.holders()  # its slot stays taken
        (obs,) = await fresh.observe(["jlate.1"])
        assert (obs.state, obs.backend_handle) == (st.JOB_STATE_RUNNING, str(child.pid)), obs
        assert dirs.record.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


async def _exists(path: pathlib.Path) -> bool:
    return path.exists()


async def _count(db: Database, state: int) -> int:
    def count(s: Session) -> int:
        return s.scalar(select(func.count()).select_from(m.Attempt).where(m.Attempt.state == state)) or 0

    return await db.run(count)
