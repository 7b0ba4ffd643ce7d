"""NodeRegistryService servicer (forgelets register and heartbeat here)."""

from __future__ import annotations

from typing import Any

from starforge.forgelet.v1 import node_registry_service_pb2 as pb
from starforge.forgelet.v1 import node_registry_service_pb2_grpc as pb_grpc

from control import nodes
from control.context import Context

HEARTBEAT_SECONDS = 2


class NodeRegistryServicer(pb_grpc.NodeRegistryServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def RegisterNode(self, request: pb.RegisterNodeRequest, context: Any) -> pb.RegisterNodeResponse:
        node = await self.ctx.db.run(lambda s: nodes.register(s, request.node))
        return pb.RegisterNodeResponse(heartbeat_interval_seconds=HEARTBEAT_SECONDS, node=node)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        state = await self.ctx.db.run(
            lambda s: nodes.heartbeat(
                s, request.name, list(request.running_attempt_ids), list(request.used_gpu_indices)
            )
        )
        return pb.HeartbeatResponse(state=state)  # type: ignore[arg-type]

    async def ListNodes(self, request: pb.ListNodesRequest, context: Any) -> pb.ListNodesResponse:
        return pb.ListNodesResponse(nodes=await self.ctx.db.run(lambda s: nodes.list_nodes(s, request.fleet)))

    async def DrainNode(self, request: pb.DrainNodeRequest, context: Any) -> pb.DrainNodeResponse:
        node = await self.ctx.db.run(lambda s: nodes.drain(s, request.name))
        self.ctx.notifier.notify("reconcile")  # pause its running attempts now
        return pb.DrainNodeResponse(node=node)

    async def UndrainNode(self, request: pb.UndrainNodeRequest, context: Any) -> pb.UndrainNodeResponse:
        return pb.UndrainNodeResponse(node=await self.ctx.db.run(lambda s: nodes.undrain(s, request.name)))
