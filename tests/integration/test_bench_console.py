"""The benchmarks' console harness (bench/console.py) starts a real console and stops it.

Every console-based row of `make bench` and `make bench-ab` goes through it; when the console's
start-up command changes, this fails in `make test` instead of in the next benchmark run."""

from __future__ import annotations

import os
import pathlib

from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc

from bench.console import running_console
from common.channel import aio_channel


async def _server_user(address: str, md: tuple[tuple[str, str], ...]) -> str:
    channel = aio_channel(address)
    try:
        info = await ctl_grpc.ControlServiceStub(channel).GetServerInfo(
            ctl.GetServerInfoRequest(), metadata=md, timeout=30
        )
        return str(info.user)
    finally:
        await channel.close(None)


async def test_the_bench_console_serves_and_stops(tmp_path: pathlib.Path) -> None:
    with running_console(tmp_path / "console") as c:  # a separate process: blocking here is fine
        assert await _server_user(c.address, c.md) == c.user
        pids = c.pids()
    for pid in pids:  # the console and its executor are gone
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in pathlib.Path(f"/proc/{pid}/status").read_text()
