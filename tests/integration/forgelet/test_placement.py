"""The agent executor against two real forgelet nodes (docker runtime, 8 configured GPUs each).

The agent executor runs in this process so the test can launch concurrently and read its
placements; the forgelets are real processes and the registry is a real control plane.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections import defaultdict

import grpc
import pytest
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.agent import AgentConfig, AgentExecutor
from tests.integration.backends.docker import DockerEngine
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import (
    RECORD_START,
    WAIT_FOR_RELEASE,
    launch_request,
    shell_capsule,
    wait_for,
)
from tests.integration.forgelet.fleet import FLEET, FORGELET_TOKEN, ForgeletProcess, agent_console, list_nodes

pytestmark = pytest.mark.docker


def out_file(f: ForgeletProcess, job_id: str, name: str) -> pathlib.Path:
    return f.state_dir / "out" / job_id / name


async def wait_file(path: pathlib.Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear")
        await asyncio.sleep(0.1)
    return path.read_text()


async def test_places_three_four_gpu_jobs_on_two_nodes_without_double_booking(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        srv = BlobServer(c.address, c.token, c.app.ctx.store)
        cfg = AgentConfig(
            fleet=FLEET,
            control_address=c.address,
            control_token=c.token,
            forgelet_token=FORGELET_TOKEN,
            state_dir=tmp_path / "agent-under-test",
        )
        agent = await AgentExecutor.create(cfg)
        try:
            bundle = shell_capsule(RECORD_START + WAIT_FOR_RELEASE)
            reqs = [launch_request(srv, bundle, series="h200", gpus=4, image=python_image) for _ in range(3)]
            results = await asyncio.gather(*(agent.launch(r) for r in reqs))
            assert not any(r.already_launched for r in results)
            node_of = {req.attempt_id: res.node for req, res in zip(reqs, results, strict=True)}
            gpus_by_node: dict[str, list[int]] = defaultdict(list)
            for req in reqs:
                placed = agent.book.get(req.attempt_id)
                assert placed is not None and len(placed.gpus) == 4
                gpus_by_node[placed.node] += placed.gpus
            assert sorted(len(g) for g in gpus_by_node.values()) == [4, 8]
            for node, gpus in gpus_by_node.items():
                assert len(set(gpus)) == len(gpus), f"GPUs double-booked on {node}: {gpus}"

            # What each container was given is what the agent chose.
            for req in reqs:
                placed = agent.book.get(req.attempt_id)
                assert placed is not None
                seen = await wait_file(out_file(fleet[placed.node], req.job_id, "starts"))
                assert seen.strip() == f"{req.attempt_id} gpus={','.join(map(str, placed.gpus))}"
            for req in reqs:
                assert (await wait_for(agent, req.attempt_id, st.JOB_STATE_RUNNING)).node == node_of[req.attempt_id]

            # Launch is idempotent per attempt id.
            again = await agent.launch(reqs[0])
            assert again.already_launched and again.node == node_of[reqs[0].attempt_id]

            # The heartbeats now show 12 GPUs in use; a fourth job fits only in the half-full node.
            deadline = time.monotonic() + 15
            while sum(len(n.used_gpu_indices) for n in (await list_nodes(c)).values()) != 12:
                assert time.monotonic() < deadline, await list_nodes(c)
                await asyncio.sleep(0.3)
            half = next(n for n, g in gpus_by_node.items() if len(g) == 4)
            fourth = launch_request(srv, bundle, series="h200", gpus=4, image=python_image)
            assert (await agent.launch(fourth)).node == half
            reqs.append(fourth)
            with pytest.raises(errors.ResourceExhausted, match="no ready node of fleet agent has 4 h200 GPUs free"):
                await agent.launch(launch_request(srv, bundle, series="h200", gpus=4, image=python_image))
            with pytest.raises(errors.InvalidArgument, match="no node of fleet agent has 16 h200 GPUs"):
                await agent.launch(launch_request(srv, bundle, series="h200", gpus=16, image=python_image))
            # forgelet itself refuses GPUs that are taken, whoever asks.
            taken = launch_request(srv, bundle, series="h200", gpus=4, image=python_image)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await fleet[half].call(
                    "StartAttempt", fl_pb.StartAttemptRequest(launch=taken, gpu_indices=[0, 1, 2, 3])
                )
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

            caps = await agent.describe()
            assert (caps.kind, caps.runtime) == ("agent", "docker")
            assert {ex_pb.EXECUTOR_CAPABILITY_GPUS, ex_pb.EXECUTOR_CAPABILITY_IMAGES} <= caps.capabilities
            (h200,) = [i for i in caps.inventory if i.series == "h200"]
            assert (h200.nodes, h200.gpus_per_node, h200.free_gpus) == (2, 8, 0)

            # A restarted agent executor still routes by its placement file; one without it
            # finds the attempts by asking the nodes (and ListAttempts rebuilds the map).
            ids = [r.attempt_id for r in reqs]
            restarted = await AgentExecutor.create(cfg)
            fresh = await AgentExecutor.create(
                AgentConfig(**{**cfg.__dict__, "state_dir": tmp_path / "agent-without-state"})
            )
            try:
                for ex in (restarted, fresh):
                    seen_obs = await ex.observe(ids)
                    assert [o.state for o in seen_obs] == [st.JOB_STATE_RUNNING] * 4
                    assert [o.node for o in seen_obs] == [node_of.get(a, half) for a in ids]
                listed = {o.attempt_id for o in await fresh.list_attempts()}
                assert set(ids) <= listed
            finally:
                await restarted.close()
                await fresh.close()

            for req in reqs:
                placed = agent.book.get(req.attempt_id)
                assert placed is not None
                out_file(fleet[placed.node], req.job_id, "release").touch()
            for req in reqs:
                obs = await wait_for(agent, req.attempt_id, timeout=60)
                assert (obs.state, obs.exit_code) == (st.JOB_STATE_SUCCEEDED, 0), obs
                assert await agent.cleanup(req.attempt_id) >= 1
                placed_node = node_of.get(req.attempt_id, half)
                assert fleet[placed_node].containers(dockerd.client, req.attempt_id) == []
                assert agent.book.get(req.attempt_id) is None
            assert await agent.cleanup(reqs[0].attempt_id) == 0  # nothing left: fine
            assert await agent.stop(reqs[0].attempt_id, 1) is False
        finally:
            await agent.close()
