"""ForgeletService servicer: adapts the agent executor's calls to this node's local executor.

Only adaptation lives here (proto -> LocalExecutor call -> proto) plus the node-level rule the
local executor does not know: a draining node takes no new attempts. Every call must carry the
executor token; `authn_interceptor` checks it before the request is read. Drain stops what
runs; how the control plane accounts for those attempts is described in docs/forgelet.md
("Draining a node").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc

from common import authn, errors
from executor_svc.base import LaunchResult, OutDirRef, entry_to_proto, observation_to_proto
from forgelet.node import Node

log = logging.getLogger("starforge.forgelet.service")


class ForgeletServicer(fl_grpc.ForgeletServiceServicer):
    """Serves ForgeletService for one node (callers are authenticated by `authn_interceptor`)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._starting: dict[str, asyncio.Future[LaunchResult]] = {}

    @property
    def _grace(self) -> float:
        return self.node.executor.cfg.default_stop_grace_seconds

    async def GetNode(self, request: fl_pb.GetNodeRequest, context: Any) -> fl_pb.GetNodeResponse:
        return fl_pb.GetNodeResponse(node=self.node.proto(await self.node.usage()))

    async def StartAttempt(self, request: fl_pb.StartAttemptRequest, context: Any) -> fl_pb.StartAttemptResponse:
        if not request.launch.attempt_id:
            raise errors.InvalidArgument(
                "launch.attempt_id is required",
                field_violations=(errors.FieldViolation("launch.attempt_id", "empty"),),
            )
        if self.node.draining:
            # A repeated StartAttempt of an attempt already here still answers (idempotency).
            (seen,) = await self.node.executor.observe([request.launch.attempt_id])
            if seen.not_found:
                self.node.refuse_if_draining()
        attempt_id = request.launch.attempt_id
        task = self._starting.get(attempt_id)
        if task is None:
            # Shielded: a caller that gives up (its deadline) does not abort a start half-way; the
            # retry joins it. Launch itself is idempotent per attempt id.
            gpus = list(request.gpu_indices) or None
            task = asyncio.ensure_future(self.node.executor.launch(request.launch, gpus=gpus))
            self._starting[attempt_id] = task
            task.add_done_callback(lambda t: self._started(attempt_id, t))
        result = await asyncio.shield(task)
        return fl_pb.StartAttemptResponse(container_id=result.backend_handle, already_started=result.already_launched)

    def _started(self, attempt_id: str, task: asyncio.Future[LaunchResult]) -> None:
        self._starting.pop(attempt_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.debug("start of %s failed: %s", attempt_id, task.exception())

    async def InspectAttempts(
        self, request: fl_pb.InspectAttemptsRequest, context: Any
    ) -> fl_pb.InspectAttemptsResponse:
        if request.attempt_ids:
            found = await self.node.executor.observe(list(request.attempt_ids))
        else:
            found = await self.node.executor.list_attempts()
        return fl_pb.InspectAttemptsResponse(observations=[observation_to_proto(o) for o in found])

    async def StopAttempt(self, request: fl_pb.StopAttemptRequest, context: Any) -> fl_pb.StopAttemptResponse:
        grace = float(request.grace_seconds) if request.grace_seconds > 0 else self._grace
        return fl_pb.StopAttemptResponse(stopped=await self.node.executor.stop(request.attempt_id, grace))

    async def RemoveAttempt(self, request: fl_pb.RemoveAttemptRequest, context: Any) -> fl_pb.RemoveAttemptResponse:
        return fl_pb.RemoveAttemptResponse(removed=await self.node.executor.cleanup(request.attempt_id) > 0)

    async def Drain(self, request: fl_pb.DrainRequest, context: Any) -> fl_pb.DrainResponse:
        self.node.drain_locally()
        # Starts accepted before the drain finish first, so that they are stopped below too.
        await asyncio.gather(*list(self._starting.values()), return_exceptions=True)
        active = await self.node.active_attempts()
        stopped = await asyncio.gather(*(self.node.executor.stop(a, self._grace) for a in active))
        ids = [a for a, was_running in zip(active, stopped, strict=True) if was_running]
        log.info("node %s drained: stopped %d attempts %s", self.node.name, len(ids), ids)
        return fl_pb.DrainResponse(stopped_attempt_ids=ids)

    async def ListArtifacts(self, request: fl_pb.ListArtifactsRequest, context: Any) -> fl_pb.ListArtifactsResponse:
        ref = OutDirRef("", request.out_key).checked()
        page = await self.node.executor.list_artifacts(ref, request.page_size, request.page_token)
        return fl_pb.ListArtifactsResponse(
            artifacts=[entry_to_proto(e) for e in page.entries], next_page_token=page.next_page_token
        )

    async def ReadArtifact(
        self, request: fl_pb.ReadArtifactRequest, context: Any
    ) -> AsyncIterator[fl_pb.ReadArtifactResponse]:
        ref = OutDirRef("", request.out_key).checked()
        async for offset, data, size in self.node.executor.read_artifact(ref, request.path, request.offset):
            yield fl_pb.ReadArtifactResponse(offset=offset, data=data, size=size)


# StartAttempt carries the LaunchRequest with the workspace's file manifest.
RECEIVE_LIMITS = {"/starforge.forgelet.v1.ForgeletService/StartAttempt": 32 * 1024 * 1024}


def authn_interceptor(token: Callable[[], str]) -> authn.AuthnInterceptor:
    """Every ForgeletService call must carry the executor token `token()` (read per call)."""
    return authn.AuthnInterceptor(
        authn.static_token(token, "forgelet executor"),
        protects=authn.everything_under("/starforge.forgelet.v1.ForgeletService/"),
        limits=RECEIVE_LIMITS,
    )
