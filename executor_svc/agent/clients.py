"""gRPC clients of the agent executor: the control plane's node registry and each node's forgelet.

Every call has a deadline and carries its bearer token; a failed call is rebuilt into the
StarforgeError the server sent (`common.rpc_status.from_rpc_error`), so the executor's logic
deals only in domain errors. A token file that cannot be read is UNAVAILABLE: the deployment is
expected to fix it, and the control plane retries meanwhile.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc

from common import errors
from common.channel import aio_channel, bearer
from common.config import ConfigError
from common.rpc_status import from_rpc_error
from common.tls import TlsConfig, check_dial
from executor_svc.base import Observation


def _metadata(token: Callable[[], str]) -> tuple[tuple[str, str], ...]:
    try:
        value = token()
    except ConfigError as exc:
        raise errors.Unavailable(str(exc)) from None
    return bearer(value) if value else ()


class RegistryClient:
    """ListNodes of one fleet on the control plane."""

    def __init__(
        self,
        address: str,
        fleet: str,
        token: Callable[[], str],
        timeout: float,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.address = address
        self.fleet = fleet
        self._token = token
        self._timeout = timeout
        self._channel = aio_channel(address, credentials)
        self._stub = reg_grpc.NodeRegistryServiceStub(self._channel)

    async def list_nodes(self) -> list[node_pb2.Node]:
        try:
            r = await self._stub.ListNodes(
                reg_pb.ListNodesRequest(fleet=self.fleet), metadata=_metadata(self._token), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            err = from_rpc_error(exc)
            raise type(err)(f"node registry at {self.address}: {err.message}") from None
        return list(r.nodes)

    async def close(self) -> None:
        await self._channel.close(None)


class ForgeletClients:
    """One channel per forgelet address; `call(address, "StartAttempt", request)`."""

    def __init__(
        self,
        token: Callable[[], str],
        timeout: float,
        credentials: grpc.ChannelCredentials | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self._token = token
        self._timeout = timeout
        self._credentials = credentials
        self._tls = tls or TlsConfig()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, fl_grpc.ForgeletServiceStub] = {}

    def _stub(self, address: str) -> fl_grpc.ForgeletServiceStub:
        stub = self._stubs.get(address)
        if stub is None:
            self._refuse_plaintext(address)
            self._channels[address] = aio_channel(address, self._credentials)
            stub = self._stubs[address] = fl_grpc.ForgeletServiceStub(self._channels[address])
        return stub

    def _refuse_plaintext(self, address: str) -> None:
        """The forgelet token never crosses a network in plain text (addresses come from the registry)."""
        try:
            check_dial(address, self._tls, "agent.tls")
        except ConfigError as exc:
            raise errors.FailedPrecondition(f"forgelet at {address}: {exc}") from None

    async def call(self, address: str, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return await getattr(self._stub(address), method)(
                request, metadata=_metadata(self._token), timeout=timeout or self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from None

    async def stream(self, address: str, method: str, request: Any, timeout: float) -> AsyncIterator[Any]:
        """The responses of a server-streaming call, errors rebuilt as for `call`."""
        try:
            async for response in getattr(self._stub(address), method)(
                request, metadata=_metadata(self._token), timeout=timeout
            ):
                yield response
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
        self._stubs.clear()


def _when(msg: ex_pb.Observation, name: str) -> dt.datetime | None:
    if not msg.HasField(name):
        return None
    stamp = getattr(msg, name)
    return dt.datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, dt.UTC)


def observation_from_proto(msg: ex_pb.Observation) -> Observation:
    """Proto -> domain, the inverse of `executor_svc.base.observation_to_proto`."""
    return Observation(
        attempt_id=msg.attempt_id,
        state=msg.state,
        not_found=msg.not_found,
        exit_code=msg.exit_code if msg.HasField("exit_code") else None,
        message=msg.message,
        log_tail=tuple(msg.log_tail),
        backend_handle=msg.backend_handle,
        node=msg.node,
        start_time=_when(msg, "start_time"),
        end_time=_when(msg, "end_time"),
        failure_class=msg.failure_class,
    )
