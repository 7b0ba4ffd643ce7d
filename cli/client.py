"""The one gRPC client of `sf`: a sync channel to the console, stubs, and error conversion.

The CLI is a short-lived, single-threaded program, so it uses grpcio's sync API. Every unary call
carries a deadline (30 s by default) and the bearer token; streams (logs, watch, upload) run
without a deadline and rely on keepalive pings to notice a dead console. Any failure leaves this
module as a `CliError` with the right exit code (see `cli.errors.from_rpc`).
"""

from __future__ import annotations

import functools
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from cli.errors import CliError, from_rpc, tls_failure, usage
from common.addresses import is_loopback
from common.channel import CHANNEL_OPTIONS, bearer

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from starforge_api.catalog.v1.catalog_service_pb2_grpc import CatalogServiceStub
    from starforge_api.control.v1.account_service_pb2_grpc import AccountServiceStub
    from starforge_api.control.v1.blob_service_pb2 import UploadBlobsResponse
    from starforge_api.control.v1.blob_service_pb2_grpc import BlobServiceStub
    from starforge_api.control.v1.control_service_pb2_grpc import ControlServiceStub
    from starforge_api.control.v1.dataset_service_pb2_grpc import DatasetServiceStub
    from starforge_api.control.v1.fleet_service_pb2_grpc import FleetServiceStub
    from starforge_api.control.v1.secret_service_pb2_grpc import SecretServiceStub
    from starforge_api.forgelet.v1.node_registry_service_pb2_grpc import NodeRegistryServiceStub

DEFAULT_TIMEOUT_S = 30.0
CONNECT_RETRIES = (0.3, 1.0)
_READY = grpc.ChannelConnectivity.READY.value[0]
R = TypeVar("R")

_OPTIONS = [
    *CHANNEL_OPTIONS,
    # a stream whose console vanished without a FIN (laptop sleep, cable) fails within ~50 s
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def _never_reached(err: grpc.RpcError) -> bool:
    """UNAVAILABLE from the client's own transport (no server attached StarForge details)."""
    code = err.code() if hasattr(err, "code") else None
    trailers: Any = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    from_server = any(item[0] == "grpc-status-details-bin" for item in trailers or ())
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN) and not from_server


def _credentials(ca_file: str | None) -> grpc.ChannelCredentials:
    """TLS credentials trusting `ca_file` (None: the system's CAs); a usage error when unreadable."""
    if ca_file is None:
        return grpc.ssl_channel_credentials()
    try:
        ca = pathlib.Path(ca_file).expanduser().read_bytes()
    except OSError as exc:
        raise usage(f"cannot read ca_file {ca_file}: {exc.strerror}") from None
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        raise usage(f"ca_file {ca_file} is not a PEM certificate bundle")
    return grpc.ssl_channel_credentials(root_certificates=ca)


def _refuse_plaintext(address: str, insecure: bool) -> None:
    """A token sent in plaintext off this machine is readable on the network: refuse unless told."""
    if insecure or is_loopback(address):
        return
    raise usage(
        f"the console at {address} is not on this machine and TLS is off: your token would cross the "
        "network in plain text; nothing was sent",
        hint="set ca_file (the CA that signed the console's certificate) or tls: true in your client config, "
        "or use a grpcs:// address; `insecure: true` allows plaintext on a network you trust",
    )


class Client:
    """Stubs for every console service, sharing one channel and the caller's token.

    With `tls` the channel verifies the console with `ca_file` (None: the system's CAs); without
    it only a loopback console (or `insecure`) is accepted.
    """

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        tls: bool = False,
        ca_file: str | None = None,
        insecure: bool = False,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = bearer(token) if token else ()
        self._succeeded = False
        self._trust = (f"ca_file {ca_file}" if ca_file else "the system's CAs") if tls else None
        if tls:
            self.channel = grpc.secure_channel(address, _credentials(ca_file), options=_OPTIONS)
        else:
            _refuse_plaintext(address, insecure)
            self.channel = grpc.insecure_channel(address, options=_OPTIONS)

    # One stub per service, made on first use: each imports its generated modules, and a command
    # uses one or two of the eight (start-up time, see cli/__init__.py).
    @functools.cached_property
    def control(self) -> ControlServiceStub:
        from starforge_api.control.v1 import control_service_pb2_grpc

        return control_service_pb2_grpc.ControlServiceStub(self.channel)

    @functools.cached_property
    def blobs(self) -> BlobServiceStub:
        from starforge_api.control.v1 import blob_service_pb2_grpc

        return blob_service_pb2_grpc.BlobServiceStub(self.channel)

    @functools.cached_property
    def blob_upload(self) -> Callable[..., UploadBlobsResponse]:
        """BlobService.UploadBlobs taking each request as a message or already encoded (bytes):
        cli/upload.py encodes its whole-blob messages itself, without a copy into a message."""
        from starforge_api.control.v1 import blob_service_pb2

        method = blob_service_pb2.DESCRIPTOR.services_by_name["BlobService"].methods_by_name["UploadBlobs"]
        return self.channel.stream_unary(
            f"/{method.containing_service.full_name}/{method.name}",
            request_serializer=_encoded,
            response_deserializer=blob_service_pb2.UploadBlobsResponse.FromString,
        )

    @functools.cached_property
    def accounts(self) -> AccountServiceStub:
        from starforge_api.control.v1 import account_service_pb2_grpc

        return account_service_pb2_grpc.AccountServiceStub(self.channel)

    @functools.cached_property
    def catalog(self) -> CatalogServiceStub:
        from starforge_api.catalog.v1 import catalog_service_pb2_grpc

        return catalog_service_pb2_grpc.CatalogServiceStub(self.channel)

    @functools.cached_property
    def datasets(self) -> DatasetServiceStub:
        from starforge_api.control.v1 import dataset_service_pb2_grpc

        return dataset_service_pb2_grpc.DatasetServiceStub(self.channel)

    @functools.cached_property
    def fleets(self) -> FleetServiceStub:
        from starforge_api.control.v1 import fleet_service_pb2_grpc

        return fleet_service_pb2_grpc.FleetServiceStub(self.channel)

    @functools.cached_property
    def secrets(self) -> SecretServiceStub:
        from starforge_api.control.v1 import secret_service_pb2_grpc

        return secret_service_pb2_grpc.SecretServiceStub(self.channel)

    @functools.cached_property
    def nodes(self) -> NodeRegistryServiceStub:
        from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc

        return node_registry_service_pb2_grpc.NodeRegistryServiceStub(self.channel)

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
        """A unary call with deadline and token; failures become `CliError`.

        A connection that failed before any call reached the console (a refused or reset
        handshake, as on a machine under heavy load) is tried again twice, 0.3 s and 1 s later,
        before the console is declared unreachable: the request never reached a server, so
        sending it again cannot do anything twice.
        """
        for pause in (*CONNECT_RETRIES, None):
            try:
                response = rpc(request, timeout=timeout or self.timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                if pause is None or self._succeeded or not _never_reached(err):
                    raise self.error(err) from None
                time.sleep(pause)
                continue
            self._succeeded = True
            return response
        raise AssertionError("unreachable")  # the loop always returns or raises

    def streaming(self) -> Client:
        """The client for streams (as `cli.fastclient.ReadClient.streaming`): this one."""
        return self

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
        return tls_failure(err, self.address, self._trust) or from_rpc(err, self.address, connected=self.connected)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _encoded(request: bytes | Message) -> bytes:
    """A request serializer for messages some of which come already encoded (`Client.blob_upload`)."""
    return request if isinstance(request, bytes) else request.SerializeToString()
