"""The client of the fast path's unary calls (`sf job ls`, `sf job status`, the re-submit of an
unchanged lab): unary calls without grpcio.

`ReadClient` makes the console's unary calls over `cli.h2unary` (HTTP/2 without grpcio's import,
docs/benchmarks.md, **cli** and **packaging**) and turns a failed call into the `CliError` that
`cli.client.Client` would (`cli.errors.tls_failure` and `from_rpc`, on an object that answers as
grpcio's error does). It falls back to that grpcio `Client` — for the call and every later one —
whenever `cli.h2unary` raises `Fallback` (no connection, a refused handshake, an answer that is
not a plain gRPC response) and from the start for what it does not do: TLS trusting the system's
CAs (grpcio has its own root store), a CA file that does not read as PEM, a plaintext console that
`Client` refuses. Streams (uploads, logs) are grpcio's: `streaming()` hands over to it for good.

A call made again through grpcio must be safe: only idempotent reads come here, and SubmitJob,
whose request carries the client's `request_id` (the console returns the job that id queued
before instead of queueing a second one: the retry the field exists for).
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from google.protobuf.message import Message
from starforge_api.control.v1 import control_service_pb2 as pb

from cli import h2unary
from cli.errors import CliError, from_rpc, tls_failure
from common.addresses import is_loopback
from common.wire import MAX_MESSAGE_BYTES, bearer

if TYPE_CHECKING:
    import ssl

    import grpc

    from cli.client import Client
    from cli.submitcalls import Accounts, Catalog, Fleets

DEFAULT_TIMEOUT_S = 30.0  # as cli.client's (tests/unit/cli/test_h2unary.py checks they agree)
R = TypeVar("R", bound=Message)


class Method(Generic[R]):
    """One unary method of a service: `cli.client.Client`'s attribute for the service and the
    method's stub, its HTTP/2 path and response type."""

    __slots__ = ("name", "path", "response", "service")

    def __init__(self, service: str, name: str, path: str, response: type[R]) -> None:  # not a dataclass:
        self.service, self.name, self.path, self.response = service, name, path, response  # ~0.3 ms of start

    def __call__(self, request: Any, *, timeout: float, metadata: Any) -> R:
        raise TypeError("a Method is made through ReadClient.call")  # it only names a call


class Control:
    """The ControlService calls the fast path makes."""

    ListJobs = Method("control", "ListJobs", "/starforge.control.v1.ControlService/ListJobs", pb.ListJobsResponse)
    GetJob = Method("control", "GetJob", "/starforge.control.v1.ControlService/GetJob", pb.GetJobResponse)
    SubmitJob = Method("control", "SubmitJob", "/starforge.control.v1.ControlService/SubmitJob", pb.SubmitJobResponse)


class ReadClient:
    """Unary calls over HTTP/2, grpcio's `Client` for what they cannot do (module docstring)."""

    control = Control()

    # the other services' calls are `sf submit`'s: their modules load only when it asks
    @property
    def catalog(self) -> Catalog:
        from cli.submitcalls import CATALOG

        return CATALOG

    @property
    def fleets(self) -> Fleets:
        from cli.submitcalls import FLEETS

        return FLEETS

    @property
    def accounts(self) -> Accounts:
        from cli.submitcalls import ACCOUNTS

        return ACCOUNTS

    def __init__(self, address: str, token: str | None, *, tls: bool, ca_file: str | None, insecure: bool) -> None:
        self.address = address
        self.timeout = DEFAULT_TIMEOUT_S
        self._token, self._tls, self._ca_file, self._insecure = token, tls, ca_file, insecure
        self._metadata = bearer(token) if token else ()
        self._trust = (f"ca_file {ca_file}" if ca_file else "the system's CAs") if tls else None
        self._channel: h2unary.Channel | None = None
        self._grpc: Client | None = None
        self._context: ssl.SSLContext | None = None
        if not self._supported():
            self._grpc = self._grpc_client()  # its own refusals (plaintext off this machine, a bad ca_file)

    def _supported(self) -> bool:
        """Whether these settings are ones h2unary applies as grpcio does (else: grpcio from the start)."""
        if not self._tls:
            return self._insecure or is_loopback(self.address)
        if self._ca_file is None:
            return False  # the system's CAs: grpcio trusts its own bundle, not the OS's
        try:
            pem = pathlib.Path(self._ca_file).expanduser().read_bytes()
            self._context = h2unary.tls_context(pem.decode("ascii")) if b"-----BEGIN CERTIFICATE-----" in pem else None
        except (OSError, ValueError):  # unreadable, not ASCII, or not certificates ssl can load
            return False
        return self._context is not None

    def _grpc_client(self) -> Client:
        from cli.client import Client

        return Client(self.address, self._token, tls=self._tls, ca_file=self._ca_file, insecure=self._insecure)

    def call(self, rpc: Method[R], request: Message, *, timeout: float | None = None) -> R:
        """A unary call with deadline and token; failures become the `CliError` grpcio's path raises."""
        if self._grpc is None:
            try:
                return self._h2_call(rpc, request, timeout or self.timeout)
            except h2unary.Fallback:
                self._close_channel()
                self._grpc = self._grpc_client()
        response: R = self._grpc.call(getattr(getattr(self._grpc, rpc.service), rpc.name), request, timeout=timeout)
        return response

    def streaming(self) -> Client:
        """grpcio's `Client`, for streams (uploads, logs) and every later call: they all share its channel."""
        if self._grpc is None:
            self._close_channel()
            self._grpc = self._grpc_client()
        return self._grpc

    def _h2_call(self, rpc: Method[R], request: Message, timeout: float) -> R:
        try:
            if self._channel is None:
                self._channel = h2unary.Channel(
                    self.address, tls=self._context, timeout=timeout, max_receive=MAX_MESSAGE_BYTES
                )
            body = self._channel.unary(rpc.path, request.SerializeToString(), self._metadata, timeout)
        except h2unary.Status as status:
            raise self._error(status) from None
        try:
            return rpc.response.FromString(body)
        except Exception:  # grpcio's deserializer failing: INTERNAL, as grpcio reports it
            raise self._error(h2unary.Status(13, "Exception deserializing response!")) from None

    def _error(self, status: h2unary.Status) -> CliError:
        err = rpc_error(status)
        connected = self._channel is not None
        return tls_failure(err, self.address, self._trust) or from_rpc(err, self.address, connected=connected)

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def close(self) -> None:
        self._close_channel()
        if self._grpc is not None:
            self._grpc.close()


def rpc_error(status: h2unary.Status) -> grpc.RpcError:
    """A `grpc.RpcError` answering `code()`, `details()` and `trailing_metadata()` as grpcio's does."""
    import grpc

    code = next((c for c in grpc.StatusCode if c.value[0] == status.code), grpc.StatusCode.UNKNOWN)

    class H2RpcError(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return code

        def details(self) -> str:
            return status.message

        def trailing_metadata(self) -> Any:  # (key, value) pairs, as grpcio's _Metadatum
            return status.trailers

    return H2RpcError()
