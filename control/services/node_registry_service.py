"""NodeRegistryService servicer (forgelets register and heartbeat here; admins enrol nodes)."""

from __future__ import annotations

from typing import Any

from starforge_api.forgelet.v1 import node_registry_service_pb2 as pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as pb_grpc

from control import auth, nodes
from control.context import Context
from control.ledger.convert import ts

HEARTBEAT_SECONDS = 2


class NodeRegistryServicer(pb_grpc.NodeRegistryServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def RegisterNode(self, request: pb.RegisterNodeRequest, context: Any) -> pb.RegisterNodeResponse:
        p = auth.current()
        node, credential = await self.ctx.db.run(lambda s: nodes.register(s, p, request.node))
        return pb.RegisterNodeResponse(heartbeat_interval_seconds=HEARTBEAT_SECONDS, node=node, node_token=credential)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        p = auth.current()
        state = await self.ctx.db.run(
            lambda s: nodes.heartbeat(
                s, p, request.name, list(request.running_attempt_ids), list(request.used_gpu_indices)
            )
        )
        return pb.HeartbeatResponse(state=state)  # type: ignore[arg-type]

    async def ListNodes(self, request: pb.ListNodesRequest, context: Any) -> pb.ListNodesResponse:
        p = auth.current()
        return pb.ListNodesResponse(nodes=await self.ctx.db.run(lambda s: nodes.list_nodes(s, p, request.fleet)))

    async def DrainNode(self, request: pb.DrainNodeRequest, context: Any) -> pb.DrainNodeResponse:
        p = auth.current()
        node = await self.ctx.db.run(lambda s: nodes.drain(s, p, request.name))
        self.ctx.notifier.notify("reconcile")  # pause its running attempts now
        return pb.DrainNodeResponse(node=node)

    async def UndrainNode(self, request: pb.UndrainNodeRequest, context: Any) -> pb.UndrainNodeResponse:
        p = auth.current()
        return pb.UndrainNodeResponse(node=await self.ctx.db.run(lambda s: nodes.undrain(s, p, request.name)))

    async def CreateJoinToken(self, request: pb.CreateJoinTokenRequest, context: Any) -> pb.CreateJoinTokenResponse:
        p = auth.current()
        token, expires = await self.ctx.db.run(
            lambda s: nodes.create_join_token(s, p, request.node, request.fleet, request.ttl_seconds)
        )
        return pb.CreateJoinTokenResponse(token=token, expire_time=ts(expires))

    async def CreateExecutorToken(
        self, request: pb.CreateExecutorTokenRequest, context: Any
    ) -> pb.CreateExecutorTokenResponse:
        p = auth.current()
        token = await self.ctx.db.run(lambda s: nodes.create_executor_token(s, p, request.fleet, request.name))
        return pb.CreateExecutorTokenResponse(token=token)
