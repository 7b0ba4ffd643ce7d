"""PostgreSQL crashes and comes back under load: the control plane reconnects and carries on.

A private PostgreSQL server (tests/reliability/pg_instance.py; never the machine's shared one)
holds the ledger. While jobs run and report and new submissions arrive, the server is stopped
the way a crash stops it (`pg_ctl stop -m immediate`) and started again a few seconds later (crash
recovery); it dies right after the executor accepted a launch and before the ledger recorded it.
Meanwhile the control plane answers promptly with UNAVAILABLE (never INTERNAL, never a
hang); the capsules journal their records and resend them; submitters retry with their request
ids. Afterwards every submitted job exists once, succeeded in one attempt and ended once in the
ledger; the executor launched each once; every log line and metric point is stored once.
"""

from __future__ import annotations

import asyncio
import pathlib
import time

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.executor.v1 import launch_request_pb2 as lr

from common import errors
from control.executors import ExecutorPool
from control.ledger import jobs
from control.ledger import state_machine as sm
from tests.integration.console import Console
from tests.reliability.harness import (
    ExecutorProcess,
    assert_all_succeeded_once,
    assert_launched_once,
    assert_reported_once,
    control_config,
    inprocess_console,
    reporting_train,
    terminal_events,
    until,
    wait_terminal,
)
from tests.reliability.pg_instance import PgInstance

BEFORE = 6
STEPS = 30
OUTAGE_SECONDS = 3.0


async def _submit(
    c: Console,
    spec: object,
    codes: list[grpc.StatusCode],
    *,
    prefix: str,
    n: int = 1000,
    until: asyncio.Event | None = None,
) -> list[str]:
    """Submit jobs one every 0.5 s (n of them, or until `until` is set), each retried with its
    request id until it is accepted."""
    ids: list[str] = []
    while len(ids) < n and not (until is not None and until.is_set()):
        while True:
            try:
                r = await c.jobs.SubmitJob(
                    ctl.SubmitJobRequest(spec=spec, request_id=f"{prefix}-{len(ids)}"),  # type: ignore[arg-type]
                    metadata=c.md,
                    timeout=10,
                )
                ids.append(r.job.job_id)
                break
            except grpc.aio.AioRpcError as e:
                codes.append(e.code())
                await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)
    return ids


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_postgres_crash_under_load_the_control_plane_reconnects_and_loses_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = PgInstance()
    armed, caught, crashed = [False], [""], asyncio.Event()
    real_launch = ExecutorPool.launch

    async def launch(self: ExecutorPool, fleet: str, request: lr.LaunchRequest) -> ex.LaunchResponse:
        response = await real_launch(self, fleet, request)
        if armed[0]:
            armed[0], caught[0] = False, request.attempt_id
            await asyncio.to_thread(pg.crash)
            crashed.set()
        return response

    monkeypatch.setattr(ExecutorPool, "launch", launch)
    executor = ExecutorProcess(tmp_path, slots=8)
    try:
        pg.init()
        pg.start()
        cfg = control_config(tmp_path, executor.address, slots=8, database_url=pg.create_database("starforge"))
        executor.start()
        async with inprocess_console(tmp_path, executor, cfg) as c:
            first = await c.submit_custom(reporting_train(STEPS, 0.05))
            spec = (await c.get(first.job_id)).spec
            codes: list[grpc.StatusCode] = []
            before = await _submit(c, spec, codes, prefix="before", n=BEFORE)
            await until(lambda: _lines_stored(c, first.job_id, 10), timeout=60, what="the first job to report")
            # the other half arrives while the server goes down, is down, and comes back; the
            # server dies right after an executor accepted a launch, before the ledger heard of it
            armed[0] = True
            enough = asyncio.Event()
            submitter = asyncio.ensure_future(_submit(c, spec, codes, prefix="during", until=enough))
            await asyncio.wait_for(crashed.wait(), 60)
            down_at = time.monotonic()
            # down: answers come at once, as UNAVAILABLE
            answered: list[tuple[float, grpc.StatusCode]] = []
            while time.monotonic() - down_at < OUTAGE_SECONDS:
                t0 = time.monotonic()
                try:
                    await c.jobs.GetJob(ctl.GetJobRequest(job_id=first.job_id), metadata=c.md, timeout=5)
                    code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as e:
                    code = e.code()
                answered.append((time.monotonic() - t0, code))
                await asyncio.sleep(0.2)
            await asyncio.to_thread(pg.start)
            # the launch whose outcome met the dead server is caught up with (its capsule reports)
            await until(lambda: _launch_recorded(c, caught[0]), timeout=60, what=f"{caught[0]} to leave SUBMITTED")
            await asyncio.sleep(1.0)
            enough.set()

            job_ids = [first.job_id, *before, *await asyncio.wait_for(submitter, 120)]
            jobs = await wait_terminal(c.channel, c.token, job_ids, timeout=200, on_timeout=pg.log_tail())
            assert_all_succeeded_once(jobs)
            await assert_reported_once(c, c.app.ctx.db, job_ids, STEPS)
            listed = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=1000), metadata=c.md)
        assert sorted(j.job_id for j in listed.jobs) == sorted(job_ids), "a retried submission made a second job"
        assert answered and all(code == grpc.StatusCode.UNAVAILABLE for _, code in answered), answered
        assert max(t for t, _ in answered) < 2.0, answered
        assert codes and set(codes) <= {grpc.StatusCode.UNAVAILABLE}, codes
        assert sorted(terminal_events(cfg.database_url)) == sorted(job_ids)
        assert_launched_once(executor.state_dir, job_ids)
    finally:
        executor.stop()
        pg.stop()
        pg.remove()


async def _launch_recorded(c: Console, attempt_id: str) -> bool:
    try:
        state = await c.app.ctx.db.run(lambda s: jobs.get_attempt(s, attempt_id).state)
    except errors.Unavailable:
        return False
    return bool(state != sm.SUBMITTED)


async def _lines_stored(c: Console, job_id: str, n: int) -> bool:
    return len(await c.logs(job_id)) >= n
