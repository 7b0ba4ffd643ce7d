"""ExecutorService servicer: adapts protos to an `Executor` and back, nothing else."""

from __future__ import annotations

from typing import Any

from starforge.executor.v1 import executor_service_pb2 as ex_pb
from starforge.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from common.channel import token_from_metadata
from executor_svc.base import Executor, capabilities_to_proto, observation_to_proto

DEFAULT_GRACE_SECONDS = 10.0


class ExecutorServicer(ex_grpc.ExecutorServiceServicer):
    """Serves one Executor. When `token` is set, every call must carry it as a bearer token."""

    def __init__(self, executor: Executor, token: str | None = None) -> None:
        self._executor = executor
        self._token = token

    def _check(self, context: Any) -> None:
        if self._token and token_from_metadata(context.invocation_metadata()) != self._token:
            raise errors.Unauthenticated("the executor token is missing or wrong")

    async def DescribeCapabilities(
        self, request: ex_pb.DescribeCapabilitiesRequest, context: Any
    ) -> ex_pb.DescribeCapabilitiesResponse:
        self._check(context)
        return capabilities_to_proto(await self._executor.describe())

    async def Launch(self, request: lr_pb.LaunchRequest, context: Any) -> ex_pb.LaunchResponse:
        self._check(context)
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
        self._check(context)
        found = await self._executor.observe(list(request.attempt_ids))
        return ex_pb.ObserveResponse(observations=[observation_to_proto(o) for o in found])

    async def Stop(self, request: ex_pb.StopRequest, context: Any) -> ex_pb.StopResponse:
        self._check(context)
        grace = float(request.grace_seconds) if request.grace_seconds > 0 else DEFAULT_GRACE_SECONDS
        return ex_pb.StopResponse(stopped=await self._executor.stop(request.attempt_id, grace))

    async def Cleanup(self, request: ex_pb.CleanupRequest, context: Any) -> ex_pb.CleanupResponse:
        self._check(context)
        return ex_pb.CleanupResponse(removed=await self._executor.cleanup(request.attempt_id))

    async def ListAttempts(self, request: ex_pb.ListAttemptsRequest, context: Any) -> ex_pb.ListAttemptsResponse:
        self._check(context)
        found = await self._executor.list_attempts()
        return ex_pb.ListAttemptsResponse(observations=[observation_to_proto(o) for o in found])
