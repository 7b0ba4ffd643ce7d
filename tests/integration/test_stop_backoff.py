"""Repeated Stop calls follow the backoff schedule, not the reconcile loop's speed.

A pause reaches an attempt whose runner is already gone while the ledger still has it RUNNING (it
waits out its exit grace): the real executor answers every Stop with stopped=false until the
ledger ends the attempt. The control plane used to ask again at once after each answer (about 60
StopAttempt calls in a quarter of a second); now it keeps to backoff.STOP.
"""

from __future__ import annotations

import asyncio
import pathlib
import time

from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from control.scheduler import backoff
from tests.integration.console import console


async def test_stop_answered_false_is_repeated_on_the_backoff_schedule(tmp_path: pathlib.Path) -> None:
    go = tmp_path / "go"
    # The training command kills its runner (no exit report reaches the control plane) when told.
    train = f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done\nkill -9 $PPID\nexec sleep 60\n"
    async with console(tmp_path / "c") as c:
        executors = c.app.ctx.executors
        real_stop = executors.stop
        calls: list[tuple[float, bool]] = []

        async def counting_stop(fleet: str, attempt_id: str, grace_seconds: int) -> bool:
            stopped = await real_stop(fleet, attempt_id, grace_seconds)
            calls.append((time.monotonic(), stopped))
            return stopped

        executors.stop = counting_stop  # type: ignore[method-assign]
        ticks = 0
        real_tick = c.app.reconciler.tick

        async def counting_tick() -> None:
            nonlocal ticks
            ticks += 1
            await real_tick()

        c.app.reconciler.tick = counting_tick  # type: ignore[method-assign]

        job = await c.submit_custom(train)
        await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=60)
        go.touch()
        await asyncio.sleep(0.3)  # the runner is gone; the ledger still says RUNNING (exit grace)
        started = time.monotonic()
        ticks_before = ticks
        await c.jobs.PauseJob(ctl.PauseJobRequest(job_id=job.job_id), metadata=c.md)
        paused = await c.wait(job.job_id, st.JOB_STATE_PAUSED, st.JOB_STATE_FAILED, timeout=60)
        elapsed = time.monotonic() - started
        ticks_during = ticks - ticks_before

    assert paused.state == st.JOB_STATE_PAUSED, paused
    assert calls, "the pause never reached the executor"
    # the first Stop may still find the command (it ends it); every later answer is stopped=false
    assert not any(stopped for _, stopped in calls[1:]), calls
    # count-based: at most what the schedule allows in the time it took (every delay at its
    # shortest), whatever the number of reconcile cycles in between
    assert len(calls) <= backoff.STOP.max_calls(elapsed), (len(calls), elapsed, ticks_during)
    assert ticks_during > len(calls), (ticks_during, len(calls))
