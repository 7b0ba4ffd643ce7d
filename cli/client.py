"""The one gRPC client of `sf`: a sync channel to the console, stubs, and error conversion.

The CLI is a short-lived, single-threaded program, so it uses grpcio's sync API. Every unary call
carries a deadline (30 s by default) and the bearer token; streams (logs, watch, upload) run
without a deadline and rely on keepalive pings to notice a dead console. Any failure leaves this
module as a `CliError` with the right exit code (see `cli.errors.from_rpc`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from starforge.catalog.v1 import catalog_service_pb2_grpc
from starforge.control.v1 import (
    account_service_pb2_grpc,
    blob_service_pb2_grpc,
    control_service_pb2_grpc,
    dataset_service_pb2_grpc,
    fleet_service_pb2_grpc,
)

from cli.errors import CliError, from_rpc
from common.channel import CHANNEL_OPTIONS, bearer

DEFAULT_TIMEOUT_S = 30.0
_READY = grpc.ChannelConnectivity.READY.value[0]
R = TypeVar("R")

_OPTIONS = [
    *CHANNEL_OPTIONS,
    # a stream whose console vanished without a FIN (laptop sleep, cable) fails within ~50 s
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


class Client:
    """Stubs for every console service, sharing one channel and the caller's token."""

    def __init__(self, address: str, token: str | None, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = bearer(token) if token else ()
        self._succeeded = False
        self.channel = grpc.insecure_channel(address, options=_OPTIONS)
        self.control = control_service_pb2_grpc.ControlServiceStub(self.channel)
        self.blobs = blob_service_pb2_grpc.BlobServiceStub(self.channel)
        self.accounts = account_service_pb2_grpc.AccountServiceStub(self.channel)
        self.catalog = catalog_service_pb2_grpc.CatalogServiceStub(self.channel)
        self.datasets = dataset_service_pb2_grpc.DatasetServiceStub(self.channel)
        self.fleets = fleet_service_pb2_grpc.FleetServiceStub(self.channel)

    @property
    def connected(self) -> bool:
        """Whether the console was reached: a call succeeded, or the channel is READY now.

        Used to tell "unreachable" from "slow" after DEADLINE_EXCEEDED. The state is read from
        the channel directly: `channel.subscribe` would start a polling thread that races with
        `close()` and prints a traceback ("Channel closed!").
        """
        if self._succeeded:
            return True
        inner = getattr(self.channel, "_channel", None)
        check = getattr(inner, "check_connectivity_state", None)
        if check is None:
            return False
        try:
            return bool(check(False) == _READY)
        except Exception:  # a closed channel or a grpcio without this method: assume not reached
            return False

    def call(self, rpc: Callable[..., R], request: Any, *, timeout: float | None = None) -> R:
        """A unary call with deadline and token; failures become `CliError`."""
        try:
            response = rpc(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self.error(err) from None
        self._succeeded = True
        return response

    def stream(self, rpc: Callable[..., Any], request: Any) -> Any:
        """Start a server stream (no deadline; keepalive guards it). Iterate it via `iterate`."""
        return rpc(request, metadata=self._metadata)

    def client_stream(self, rpc: Callable[..., R], requests: Iterator[Any]) -> R:
        """A client-streaming call (uploads): no deadline, failures become `CliError`."""
        try:
            return rpc(requests, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self.error(err) from None

    def error(self, err: grpc.RpcError) -> CliError:
        """The CliError for a failed call on this channel."""
        return from_rpc(err, self.address, connected=self.connected)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
