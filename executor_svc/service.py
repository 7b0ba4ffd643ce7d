"""ExecutorService servicer: adapts protos to an `Executor` and back, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import authn, errors
from executor_svc.base import Executor, OutDirRef, capabilities_to_proto, observation_to_proto, page_to_proto

DEFAULT_GRACE_SECONDS = 10.0


class ExecutorServicer(ex_grpc.ExecutorServiceServicer):
    """Serves one Executor. Callers are authenticated before a handler runs (`authn_interceptor`)."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    async def DescribeCapabilities(
        self, request: ex_pb.DescribeCapabilitiesRequest, context: Any
    ) -> ex_pb.DescribeCapabilitiesResponse:
        return capabilities_to_proto(await self._executor.describe())

    async def Launch(self, request: lr_pb.LaunchRequest, context: Any) -> ex_pb.LaunchResponse:
        if not request.attempt_id:
            raise errors.InvalidArgument(
                "attempt_id is required", field_violations=(errors.FieldViolation("attempt_id", "empty"),)
            )
        r = await self._executor.launch(request)
        return ex_pb.LaunchResponse(
            backend_handle=r.backend_handle,
            already_launched=r.already_launched,
            node=r.node,
            image_digest=r.image_digest,
            out_dir=r.out_dir,
        )

    async def Observe(self, request: ex_pb.ObserveRequest, context: Any) -> ex_pb.ObserveResponse:
        found = await self._executor.observe(list(request.attempt_ids))
        return ex_pb.ObserveResponse(observations=[observation_to_proto(o) for o in found])

    async def Stop(self, request: ex_pb.StopRequest, context: Any) -> ex_pb.StopResponse:
        grace = float(request.grace_seconds) if request.grace_seconds > 0 else DEFAULT_GRACE_SECONDS
        return ex_pb.StopResponse(stopped=await self._executor.stop(request.attempt_id, grace))

    async def Cleanup(self, request: ex_pb.CleanupRequest, context: Any) -> ex_pb.CleanupResponse:
        return ex_pb.CleanupResponse(removed=await self._executor.cleanup(request.attempt_id))

    async def ListAttempts(self, request: ex_pb.ListAttemptsRequest, context: Any) -> ex_pb.ListAttemptsResponse:
        found = await self._executor.list_attempts()
        return ex_pb.ListAttemptsResponse(observations=[observation_to_proto(o) for o in found])

    async def ListArtifacts(self, request: ex_pb.ListArtifactsRequest, context: Any) -> ex_pb.ListArtifactsResponse:
        ref = OutDirRef(request.attempt_id, request.out_key, request.node).checked()
        return page_to_proto(await self._executor.list_artifacts(ref, request.page_size, request.page_token))

    async def ReadArtifact(
        self, request: ex_pb.ReadArtifactRequest, context: Any
    ) -> AsyncIterator[ex_pb.ReadArtifactResponse]:
        ref = OutDirRef(request.attempt_id, request.out_key, request.node).checked()
        async for offset, data, size in self._executor.read_artifact(ref, request.path, request.offset):
            yield ex_pb.ReadArtifactResponse(offset=offset, data=data, size=size)


# Launch carries the workspace's file manifest (about 120 bytes a file).
RECEIVE_LIMITS = {"/starforge.executor.v1.ExecutorService/Launch": 32 * 1024 * 1024}


def authn_interceptor(token: str) -> authn.AuthnInterceptor:
    """Every ExecutorService call must carry `token`; an empty token (`insecure: true`, loopback
    only) checks nothing but the message sizes."""
    service_methods = authn.everything_under("/starforge.executor.v1.ExecutorService/")
    return authn.AuthnInterceptor(
        authn.static_token(lambda: token, "executor"),
        protects=service_methods if token else (lambda method: False),
        limits=RECEIVE_LIMITS,
    )
