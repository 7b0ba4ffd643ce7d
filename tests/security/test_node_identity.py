"""Node identity: a tenant cannot take over, drain or invent nodes of the agent fleet.

Real processes: the console (control plane in-process, the agent executor as a process) and two
forgelet nodes enrolled with join tokens (docker runtime on the private dockerd). The victim is
the admin's job running on one node; the attacker is a normal user `mallory` with a personal
access token, and then a node (n2) using its own node credential against n1.
"""

from __future__ import annotations

import pathlib

import grpc
import pytest
from starforge_api.control.v1 import fleet_service_pb2 as fleet_pb
from starforge_api.control.v1 import fleet_service_pb2_grpc as fleet_grpc
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import bearer
from forgelet.identity import CREDENTIAL_FILE
from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.forgelet.fleet import FLEET, ForgeletProcess, agent_console, join_token, list_nodes
from tests.integration.forgelet.test_e2e import WAIT_FOR_RELEASE, other, release, running_on, submit, wait_state
from tests.security.identity_support import new_user, refused

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DENIED = grpc.StatusCode.PERMISSION_DENIED


def fake_node(name: str, address: str, fleet: str = FLEET, gpus: int = 8) -> node_pb2.Node:
    """A node description an attacker would send: their own address, invented h200 GPUs."""
    return node_pb2.Node(
        name=name,
        fleet=fleet,
        address=address,
        gpus=[node_pb2.Gpu(index=i, uuid=f"fake-{i}", series="h200") for i in range(gpus)],
    )


def credential(f: ForgeletProcess) -> str:
    path = f.state_dir / CREDENTIAL_FILE
    assert path.stat().st_mode & 0o777 == 0o600, oct(path.stat().st_mode)
    return path.read_text().strip()


async def test_tenant_and_other_node_cannot_take_over_a_node(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("victim", WAIT_FOR_RELEASE, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "victim")
        job, node = await running_on(c, job_id)
        victim, thief = fleet[node], fleet[other(node)]
        before = (await list_nodes(c))[node]
        registry = reg_grpc.NodeRegistryServiceStub(c.channel)
        mallory = bearer(await new_user(c, "mallory"))
        hijack = fake_node(node, "127.0.0.1:1")

        # A personal access token is no node identity.
        await refused(registry.RegisterNode(reg_pb.RegisterNodeRequest(node=hijack), metadata=mallory), DENIED)
        await refused(
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=fake_node("n9", "127.0.0.1:1")), metadata=mallory),
            DENIED,
        )
        await refused(registry.Heartbeat(reg_pb.HeartbeatRequest(name=node), metadata=mallory), DENIED)
        await refused(registry.DrainNode(reg_pb.DrainNodeRequest(name=node), metadata=mallory), DENIED, "FORBIDDEN")
        await refused(registry.UndrainNode(reg_pb.UndrainNodeRequest(name=node), metadata=mallory), DENIED)
        await refused(registry.ListNodes(reg_pb.ListNodesRequest(fleet=FLEET), metadata=mallory), DENIED)
        await refused(
            registry.CreateJoinToken(reg_pb.CreateJoinTokenRequest(node="n9", fleet=FLEET), metadata=mallory),
            DENIED,
            "FORBIDDEN",
        )
        fleets = await fleet_grpc.FleetServiceStub(c.channel).ListFleets(fleet_pb.ListFleetsRequest(), metadata=mallory)
        assert [(f.name, f.executor_address) for f in fleets.fleets] == [(FLEET, "")]

        # Another node's credential acts as that node only: no hijack, no new names, no other fleet.
        other_node = bearer(credential(thief))
        await refused(
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=hijack), metadata=other_node),
            DENIED,
            "NODE_IDENTITY",
        )
        await refused(
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=fake_node("n9", thief.address)), metadata=other_node),
            DENIED,
            "NODE_IDENTITY",
        )
        moved = fake_node(thief.name, thief.address, fleet="elsewhere")
        await refused(
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=moved), metadata=other_node), DENIED, "NODE_IDENTITY"
        )
        await refused(
            registry.Heartbeat(reg_pb.HeartbeatRequest(name=node), metadata=other_node), DENIED, "NODE_IDENTITY"
        )
        await refused(
            registry.DrainNode(reg_pb.DrainNodeRequest(name=node), metadata=other_node), DENIED, "NODE_IDENTITY"
        )
        # The join token the victim node used is spent.
        await refused(
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=hijack), metadata=bearer(victim.join_token)),
            grpc.StatusCode.UNAUTHENTICATED,
            "JOIN_TOKEN_USED",
        )

        nodes = await list_nodes(c)
        assert "n9" not in nodes
        assert (nodes[node].address, nodes[node].fleet, nodes[node].state) == (
            before.address,
            FLEET,
            node_pb2.NODE_STATE_READY,
        )
        # The victim's job kept running on its node and finishes there.
        release(victim, job_id)
        done = await wait_state(c, job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done
        assert [a.node for a in done.attempts] == [node]
        assert job.attempts[-1].attempt_id == done.attempts[-1].attempt_id


async def test_join_token_binds_name_and_fleet_and_is_single_use(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd, nodes=("n1",)) as (c, fleet):
        registry = reg_grpc.NodeRegistryServiceStub(c.channel)
        token = await join_token(c, "n3")
        # A join token for n3 cannot register n1 (a name it was not minted for) or another fleet.
        await refused(
            registry.RegisterNode(
                reg_pb.RegisterNodeRequest(node=fake_node("n1", "127.0.0.1:1")), metadata=bearer(token)
            ),
            DENIED,
            "NODE_IDENTITY",
        )
        await refused(
            registry.RegisterNode(
                reg_pb.RegisterNodeRequest(node=fake_node("n3", "127.0.0.1:1", fleet="gpu")), metadata=bearer(token)
            ),
            DENIED,
            "NODE_IDENTITY",
        )
        first = await registry.RegisterNode(
            reg_pb.RegisterNodeRequest(node=fake_node("n3", "127.0.0.1:1")), metadata=bearer(token)
        )
        assert first.node_token.startswith("sfn_")
        await refused(
            registry.RegisterNode(
                reg_pb.RegisterNodeRequest(node=fake_node("n3", "127.0.0.1:1")), metadata=bearer(token)
            ),
            grpc.StatusCode.UNAUTHENTICATED,
            "JOIN_TOKEN_USED",
        )
        # The credential heartbeats its node; n1 (enrolled by the harness) is untouched.
        hb = await registry.Heartbeat(reg_pb.HeartbeatRequest(name="n3"), metadata=bearer(first.node_token))
        assert hb.state == node_pb2.NODE_STATE_READY
        nodes = await list_nodes(c)
        assert nodes["n1"].address == fleet["n1"].address
