"""Helpers for tests/security/test_bounded_inputs.py: tenants, a real control-plane process, /proc."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.control.v1 import blob_service_pb2 as blob

from common.channel import aio_channel
from tests.integration.console import Console, executor_yaml, start_executor_process
from tests.reliability.harness import ControlProcess

CHUNK = 1 << 20


async def tenant(c: Console, name: str) -> Console:
    """`c` as a new normal (non-admin) user with a personal token."""
    accounts = acc_grpc.AccountServiceStub(c.channel)
    token = (await accounts.CreateUser(acc.CreateUserRequest(name=name), metadata=c.md)).token
    return dataclasses.replace(c, token=token, extra={**c.extra, "user": name})


@contextlib.asynccontextmanager
async def control_process(root: pathlib.Path, **config: Any) -> AsyncIterator[tuple[ControlProcess, Console]]:
    """A real `python -m control.main` process (own pid: RSS and threads are its own) with a local
    process-runtime executor, and an admin Console talking to it over gRPC."""
    root.mkdir(parents=True, exist_ok=True)
    executor, executor_address = start_executor_process(
        root, executor_yaml(root, "process", {"inventory": [{"series": "cpu", "gpus": 0, "slots": 4}]})
    )
    control = ControlProcess(root, executor_address, **config)
    control.start()
    channel = aio_channel(control.address)
    c = Console(
        app=None,  # type: ignore[arg-type]
        token=control.token,
        root=root,
        executor=executor,
        executor_address=executor_address,
        channel=channel,
        extra={"user": "admin"},
    )
    try:
        yield control, c
    finally:
        await channel.close(None)
        control.stop()
        from control import embedded

        embedded.stop_process(executor)


def zeros_digest(size: int) -> str:
    h = hashlib.sha256()
    block = bytes(CHUNK)
    for _ in range(size // CHUNK):
        h.update(block)
    h.update(bytes(size % CHUNK))
    return h.hexdigest()


def zeros_chunks(digest: str, size: int) -> Iterator[blob.UploadBlobsRequest]:
    """A blob of `size` zero bytes in 1 MiB messages (no message near gRPC's size limit)."""
    sent = 0
    while sent < size:
        n = min(CHUNK, size - sent)
        sent += n
        yield blob.UploadBlobsRequest(digest=digest, size=size, data=bytes(n), finish=sent == size)


def rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def thread_count(pid: int) -> int:
    return len(list(pathlib.Path(f"/proc/{pid}/task").iterdir()))
