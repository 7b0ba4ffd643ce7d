"""forgelet as a real process against a real control plane: registration, heartbeats, drain state.

These nodes use the process runtime (a CPU node), so they need no Docker engine; the docker
fleet is exercised end to end in test_e2e.py.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_spec_pb2 as spec_pb

from control.db import models as m
from tests.integration.console import Console, console
from tests.integration.forgelet.fleet import FLEET, ForgeletProcess, join_token, list_nodes, wait_nodes


@pytest.fixture
async def cpu_node(tmp_path: pathlib.Path) -> AsyncIterator[tuple[Console, ForgeletProcess]]:
    async with console(tmp_path / "console") as c:
        f = ForgeletProcess("n1", tmp_path / "n1", c.address, await join_token(c, "n1"), runtime="process")
        f.start()
        try:
            yield c, f
        finally:
            f.stop()


def stamp(n: node_pb2.Node) -> float:
    return n.last_heartbeat_time.seconds + n.last_heartbeat_time.nanos / 1e9


async def test_registers_configured_inventory_and_heartbeats(cpu_node: tuple[Console, ForgeletProcess]) -> None:
    c, f = cpu_node
    n = (await wait_nodes(c, ["n1"]))["n1"]
    assert (n.address, n.fleet, n.inventory_source, n.version) == (f.address, FLEET, "config", "0.1.0")
    assert [(g.index, g.uuid, g.series) for g in n.gpus] == [(i, f"cfg-n1-{i}", "h200") for i in range(8)]
    assert list(n.running_attempt_ids) == [] and list(n.used_gpu_indices) == []
    first = stamp(n)
    await asyncio.sleep(4.5)  # the registry asks for a heartbeat every 2 s
    assert stamp((await list_nodes(c))["n1"]) > first + 1

    # The registry forgets the node (a fresh database): the next heartbeat gets NOT_FOUND and
    # forgelet registers again by itself.
    await c.app.ctx.db.run(lambda s: s.delete(s.get(m.Node, "n1")))
    assert "n1" not in await list_nodes(c)
    again = (await wait_nodes(c, ["n1"], timeout=15))["n1"]
    assert again.address == f.address and len(again.gpus) == 8


async def test_forgelet_service_needs_the_executor_token(cpu_node: tuple[Console, ForgeletProcess]) -> None:
    _, f = cpu_node
    node = await f.get_node()
    assert (node.name, node.state, node.inventory_source) == ("n1", node_pb2.NODE_STATE_READY, "config")
    for token in (None, "wrong-token"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await f.call("GetNode", fl_pb.GetNodeRequest(), token=token)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def cpu_launch(attempt_id: str) -> fl_pb.StartAttemptRequest:
    job_id = attempt_id.split(".", maxsplit=1)[0]
    return fl_pb.StartAttemptRequest(
        launch=lr_pb.LaunchRequest(
            attempt_id=attempt_id,
            job_id=job_id,
            attempt_number=1,
            pools=[spec_pb.Pool(name="main", series="cpu", nodes=1, gpus_per_node=0)],
        )
    )


async def test_drain_command_and_restart_keep_the_node_drained(cpu_node: tuple[Console, ForgeletProcess]) -> None:
    c, f = cpu_node
    await wait_nodes(c, ["n1"])
    r = await asyncio.to_thread(f.drain, "--grace", "0", "--wait", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DRAINING in the registry" in r.stdout and "stopped 0 attempt(s)" in r.stdout and "DRAINED" in r.stdout
    assert (await f.get_node()).state == node_pb2.NODE_STATE_DRAINING
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await f.call("StartAttempt", cpu_launch("jdrained0001.1"))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "draining" in (info.value.details() or "")

    # A restarted forgelet learns the drain from the registry when it registers again.
    f.kill()
    f.start()
    await wait_nodes(c, ["n1"], state=node_pb2.NODE_STATE_DRAINED)
    for _ in range(100):  # until its RegisterNode was answered
        if (await f.get_node()).state == node_pb2.NODE_STATE_DRAINING:
            break
        await asyncio.sleep(0.1)
    assert (await f.get_node()).state == node_pb2.NODE_STATE_DRAINING
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await f.call("StartAttempt", cpu_launch("jdrained0002.1"))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
