"""Clients of the fleets' executor services: one channel per fleet, deadlines on every call.

The fleet's kind decides the executor. At start and periodically the control plane asks each
executor what it is (DescribeCapabilities); a fleet whose executor reports another kind is a
configuration error and is never used — no job ever lands on another backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.executor.v1 import launch_request_pb2 as lr

from common import errors, runtimes
from common.channel import aio_channel, bearer
from common.rpc_status import from_rpc_error
from control.config import FleetConfig

log = logging.getLogger("starforge.executors")

ARTIFACT_LIST_SECONDS = 300.0
ARTIFACT_READ_SECONDS = 6 * 3600.0  # one file of a checkpoint, however large


@dataclass
class FleetStatus:
    """What the control plane knows about a fleet's executor right now."""

    config: FleetConfig
    reachable: bool = False
    ever_reachable: bool = False
    misconfigured: str = ""  # non-empty: never use this fleet
    last_error: str = ""
    capabilities: frozenset[int] = frozenset()
    runtime: str = ""
    checked_at: float = 0.0
    inventory: list[ex.SeriesInventory] = field(default_factory=list)

    def why_unusable(self) -> str:
        if self.misconfigured:
            return self.misconfigured
        if not self.reachable:
            return f"fleet {self.config.name}: executor at {self.config.address} is unreachable" + (
                f" ({self.last_error})" if self.last_error else ""
            )
        return ""

    def refuse_pause(self, job_id: str) -> None:
        """FailedPrecondition when this fleet's executor declared that it cannot pause.

        PAUSE means FORGE_OUT_DIR outlives the attempt, so a resumed attempt finds the checkpoint;
        on a fleet without it, pausing would throw the job's checkpoints away. A fleet not checked
        yet is not refused here: the control plane has no answer to go by.
        """
        if self.ever_reachable and ex.EXECUTOR_CAPABILITY_PAUSE not in self.capabilities:
            name = self.config.name
            raise errors.FailedPrecondition(
                f"job {job_id} runs on fleet {name} ({self.config.kind}), which cannot pause: its "
                "checkpoints do not outlive the attempt; stop the job instead (`sf job stop`)",
                precondition_violations=(errors.PreconditionViolation("FLEET", name, "no PAUSE capability"),),
            )


def _answered(e: grpc.aio.AioRpcError) -> bool:
    """The executor itself answered (its error carries StarForge details): it is reachable, what
    it could not reach is behind it (a dead forgelet node, the Kubernetes API, slurmrestd)."""
    trailers: Any = e.trailing_metadata() or ()
    return any(item[0] == "grpc-status-details-bin" for item in trailers)


class ExecutorPool:
    def __init__(
        self, fleets: list[FleetConfig], deadline: float, credentials: grpc.ChannelCredentials | None = None
    ) -> None:
        self.deadline = deadline
        self.status = {f.name: FleetStatus(f) for f in fleets}
        # TLS (and the client certificate for mutual TLS) when the control plane has tls.ca_file
        self._credentials = credentials
        # Channels are made on first use, inside the event loop that serves them: a grpc.aio
        # channel binds to the loop current when it is made, and a pool may be built before any.
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, ex_grpc.ExecutorServiceStub] = {}

    def _md(self, fleet: str) -> tuple[tuple[str, str], ...]:
        token = self.status[fleet].config.token
        return bearer(token) if token else ()

    def stub(self, fleet: str) -> ex_grpc.ExecutorServiceStub:
        if fleet not in self.status:
            raise errors.NotFound(f"no fleet named {fleet!r}")
        stub = self._stubs.get(fleet)
        if stub is None:
            channel = aio_channel(self.status[fleet].config.address, self._credentials)
            self._channels[fleet] = channel
            stub = self._stubs[fleet] = ex_grpc.ExecutorServiceStub(channel)
        return stub

    async def check(self, fleet: str) -> FleetStatus:
        """Ask the executor what it is; record reachability and kind mismatches."""
        st = self.status[fleet]
        try:
            caps = await self.stub(fleet).DescribeCapabilities(
                ex.DescribeCapabilitiesRequest(), metadata=self._md(fleet), timeout=min(self.deadline, 5.0)
            )
        except grpc.aio.AioRpcError as e:
            st.reachable = False
            st.last_error = from_rpc_error(e).message
        else:
            st.reachable = True
            st.ever_reachable = True
            st.last_error = ""
            st.capabilities = frozenset(caps.capabilities)
            st.runtime = caps.runtime
            st.inventory = list(caps.inventory)
            if caps.kind != st.config.kind:
                st.misconfigured = (
                    f"fleet {fleet} is configured as kind {st.config.kind!r} but the executor at "
                    f"{st.config.address} is {caps.kind!r}; fix the fleet's kind or address"
                )
                log.error("%s", st.misconfigured)
            elif st.config.host_runtime and caps.runtime not in runtimes.HOST_RUNTIMES:
                st.misconfigured = (
                    f"fleet {fleet} declares host_runtime but its executor at {st.config.address} runs "
                    f"images ({caps.runtime}); remove host_runtime or use a process-runtime executor"
                )
                log.error("%s", st.misconfigured)
        st.checked_at = time.time()
        return st

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(name) for name in self.status))

    async def _call(self, fleet: str, method: str, request: object, timeout: float | None = None) -> object:
        st = self.status.get(fleet)
        if st is None:
            raise errors.NotFound(f"no fleet named {fleet!r}")
        if st.misconfigured:
            raise errors.FailedPrecondition(st.misconfigured)
        try:
            response = await getattr(self.stub(fleet), method)(
                request, metadata=self._md(fleet), timeout=timeout or self.deadline
            )
        except grpc.aio.AioRpcError as e:
            err = from_rpc_error(e)
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and not _answered(e):
                st.reachable = False
                st.last_error = err.message
            raise err from None
        if not st.reachable and st.ever_reachable:
            # It answered again (restarted): use it now rather than at the next periodic check.
            st.reachable, st.last_error = True, ""
        return response

    async def launch(self, fleet: str, request: lr.LaunchRequest) -> ex.LaunchResponse:
        return await self._call(fleet, "Launch", request)  # type: ignore[return-value]

    async def observe(self, fleet: str, attempt_ids: list[str]) -> list[ex.Observation]:
        r: ex.ObserveResponse = await self._call(fleet, "Observe", ex.ObserveRequest(attempt_ids=attempt_ids))  # type: ignore[assignment]
        return list(r.observations)

    async def stop(self, fleet: str, attempt_id: str, grace_seconds: int) -> bool:
        r: ex.StopResponse = await self._call(  # type: ignore[assignment]
            fleet,
            "Stop",
            ex.StopRequest(attempt_id=attempt_id, grace_seconds=grace_seconds),
            timeout=self.deadline + grace_seconds,
        )
        return r.stopped

    async def cleanup(self, fleet: str, attempt_id: str) -> int:
        r: ex.CleanupResponse = await self._call(fleet, "Cleanup", ex.CleanupRequest(attempt_id=attempt_id))  # type: ignore[assignment]
        return r.removed

    async def list_artifacts(self, fleet: str, request: ex.ListArtifactsRequest) -> ex.ListArtifactsResponse:
        # A first listing hashes the files of the page on the executor: more than a control call.
        return await self._call(fleet, "ListArtifacts", request, timeout=max(self.deadline, ARTIFACT_LIST_SECONDS))  # type: ignore[return-value]

    async def read_artifact(
        self, fleet: str, request: ex.ReadArtifactRequest
    ) -> AsyncIterator[ex.ReadArtifactResponse]:
        """The executor's chunks of one file; errors rebuilt as StarforgeErrors."""
        st = self.status.get(fleet)
        if st is None:
            raise errors.NotFound(f"no fleet named {fleet!r}")
        if st.misconfigured:
            raise errors.FailedPrecondition(st.misconfigured)
        call = self.stub(fleet).ReadArtifact(request, metadata=self._md(fleet), timeout=ARTIFACT_READ_SECONDS)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for ch in channels:
            await ch.close(None)
