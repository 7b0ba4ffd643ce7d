"""Helpers of the identity security tests: hostile users, refusals, a process's peak memory."""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc

from common.channel import bearer
from common.rpc_status import from_rpc_error
from tests.integration.console import Console


async def create_user(channel: grpc.aio.Channel, admin_token: str, name: str) -> str:
    """A normal (non-admin) user's personal access token, created by an admin."""
    stub = acc_grpc.AccountServiceStub(channel)
    r = await stub.CreateUser(acc.CreateUserRequest(name=name), metadata=bearer(admin_token), timeout=30)
    return str(r.token)


async def new_user(c: Console, name: str) -> str:
    """A normal user's personal access token on the console `c`."""
    return await create_user(c.channel, c.token, name)


async def refused(call: Awaitable[Any], code: grpc.StatusCode, reason: str = "") -> str:
    """Await `call`, which must fail with `code` (and ErrorInfo `reason` when given); its message."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value
    if reason:
        assert from_rpc_error(info.value).reason_name == reason, info.value
    details = info.value.details() or ""
    assert "Traceback" not in details
    return details


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM) in KiB: a body it parsed shows up here for good."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")
