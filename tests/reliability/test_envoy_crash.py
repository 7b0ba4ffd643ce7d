"""envoy (the console's grpc-web front door) is SIGKILLed twice while grpc-web traffic flows: a
browser-like follower of a reporting job's logs (StreamJobLogs, follow) and a GetServerInfo poll,
both speaking grpc-web over HTTP/1.1 through envoy, with no `sf` involved.

The control plane started envoy and supervises it by its PID handle: a dead envoy is restarted
on the same port within a few seconds. grpc-web calls fail while it is down and work again after;
the follower resumes after its cursor (attempt, offset), so it receives every line exactly once;
the job itself never notices. When the control plane stops, its envoy stops with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pathlib
import signal
import time

import httpx
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console
from tests.ports import free_port
from tests.reliability import grpc_web
from tests.reliability.harness import assert_reported_once, reporting_train, until

STEPS = 80
SERVICE = "starforge.control.v1.ControlService"


class Follower:
    """`sf job logs -f` as a browser does it: grpc-web through envoy, resuming after its cursor."""

    def __init__(self, client: httpx.AsyncClient, base: str, token: str, job_id: str) -> None:
        self.client, self.base, self.token, self.job_id = client, base, token, job_id
        self.lines: list[str] = []
        self.cursor = (0, 0)
        self.reconnects = 0
        self.final = 0

    async def run(self) -> None:
        while not self.final:
            req = ctl.StreamJobLogsRequest(job_id=self.job_id, follow=True)
            if self.cursor[0]:
                req.after_attempt_number, req.after_offset = self.cursor
            try:
                async for r in grpc_web.stream(
                    self.client, self.base, f"{SERVICE}/StreamJobLogs", req, ctl.StreamJobLogsResponse, self.token
                ):
                    for line in r.lines:
                        self.lines.append(line.text)
                        self.cursor = (line.attempt_number, line.offset)
                    self.final = r.final_state
            except (httpx.TransportError, grpc_web.GrpcWebError):
                self.reconnects += 1
                await asyncio.sleep(0.2)


class Pinger:
    """GetServerInfo through envoy every 100 ms: (time, ok) samples."""

    def __init__(self, client: httpx.AsyncClient, base: str, token: str) -> None:
        self.client, self.base, self.token = client, base, token
        self.samples: list[tuple[float, bool]] = []

    async def run(self) -> None:
        while True:
            try:
                r = await grpc_web.unary(
                    self.client,
                    self.base,
                    f"{SERVICE}/GetServerInfo",
                    ctl.GetServerInfoRequest(),
                    ctl.GetServerInfoResponse,
                    self.token,
                )
                ok = r.user == "admin"
            except (httpx.TransportError, grpc_web.GrpcWebError):
                ok = False
            self.samples.append((time.monotonic(), ok))
            await asyncio.sleep(0.1)

    def recovered_after(self, t: float) -> float | None:
        """Seconds from `t` to the first good answer after the first failure following it."""
        failed = False
        for at, ok in self.samples:
            if at < t:
                continue
            failed = failed or not ok
            if failed and ok:
                return at - t
        return None


async def _alive_again(c: Console, old_pid: int) -> bool:
    envoy = c.app.envoy
    return envoy is not None and envoy.alive() and envoy.proc is not None and envoy.proc.pid != old_pid


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_envoy_sigkill_is_restarted_and_grpc_web_followers_lose_and_repeat_nothing(
    tmp_path: pathlib.Path,
) -> None:
    ui = f"127.0.0.1:{free_port()}"
    async with console(tmp_path, ui_listen=ui) as c:
        assert c.app.envoy is not None and c.app.envoy.proc is not None
        base = f"http://{ui}"
        job = await c.submit_custom(reporting_train(STEPS, 0.1))
        pids: list[int] = []
        kills: list[float] = []
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=60.0)) as client:
            follower = Follower(client, base, c.token, job.job_id)
            pinger = Pinger(client, base, c.token)
            tasks = [asyncio.ensure_future(follower.run()), asyncio.ensure_future(pinger.run())]
            try:
                for want in (10, 40):  # mid-stream, twice
                    await until(functools.partial(_count_at_least, follower, want), timeout=60, what=f"{want} lines")
                    pid = c.app.envoy.proc.pid
                    pids.append(pid)
                    kills.append(time.monotonic())
                    os.kill(pid, signal.SIGKILL)
                    await until(functools.partial(_alive_again, c, pid), timeout=15, what="envoy to be restarted")
                await asyncio.wait_for(tasks[0], 120)
                await asyncio.sleep(0.5)  # a few more pings on the last envoy
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=60)
        assert done.state == st.JOB_STATE_SUCCEEDED and len(done.attempts) == 1, done
        last = c.app.envoy.proc.pid
        assert c.app.envoy.restarts == 2
        await assert_reported_once(c, c.app.ctx.db, [job.job_id], STEPS)
    # every line exactly once, in order, although the stream was cut twice
    assert [ln for ln in follower.lines if ln.startswith("line ")] == [f"line {i}" for i in range(1, STEPS + 1)]
    assert follower.reconnects >= 2 and follower.final == st.JOB_STATE_SUCCEEDED
    # grpc-web failed while envoy was down and came back within seconds, each time
    for killed_at in kills:
        back = pinger.recovered_after(killed_at)
        assert back is not None and back < 10, (back, pinger.samples[-20:])
    assert pinger.samples[-1][1]
    # the killed envoys are gone, and the control plane stopped the last one when it stopped
    for pid in [*pids, last]:
        assert not _exists(pid), f"envoy pid {pid} still runs"


async def _count_at_least(f: Follower, n: int) -> bool:
    return len(f.lines) >= n


def _exists(pid: int) -> bool:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = pathlib.Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
