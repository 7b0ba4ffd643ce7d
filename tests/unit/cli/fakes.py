"""Fake gRPC pieces for unit tests (no sockets)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc

from cli.errors import CliError, from_rpc
from common import errors
from common.rpc_status import to_grpc_status


class FakeRpcError(grpc.RpcError):
    """What a failed grpcio call raises: code(), details(), trailing_metadata()."""

    def __init__(self, code: grpc.StatusCode, details: str = "", trailers: tuple[Any, ...] = ()) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self._trailers = trailers

    @classmethod
    def from_error(cls, err: errors.StarforgeError) -> FakeRpcError:
        """As the server's ErrorInterceptor would send `err`."""
        status = to_grpc_status(err)
        return cls(status.code, status.details, tuple(status.trailing_metadata))

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[Any, ...]:
        return self._trailers


class FakeStream:
    """A server-stream call: yields items, then optionally raises an error."""

    def __init__(self, items: Iterable[Any], error: grpc.RpcError | None = None) -> None:
        self.items = list(items)
        self.error = error
        self.cancelled = False

    def __iter__(self) -> Iterator[Any]:
        yield from self.items
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        self.cancelled = True


class FakeClient:
    """Stands in for cli.client.Client: `handlers[name](request)` answers each RPC."""

    def __init__(self, handlers: dict[str, Callable[[Any], Any]], address: str = "127.0.0.1:7070") -> None:
        self.address = address
        self.handlers = handlers
        self.requests: dict[str, list[Any]] = {}
        self.connected = True
        outer = self

        class _Stub:
            def __getattr__(self, name: str) -> Callable[..., Any]:
                def rpc(request: Any, **_: Any) -> Any:
                    outer.requests.setdefault(name, []).append(request)
                    return outer.handlers[name](request)

                return rpc

        self.control = self.blobs = self.accounts = self.catalog = self.datasets = self.fleets = _Stub()

        def blob_upload(requests: Iterator[Any], **_: Any) -> Any:
            # as Client.blob_upload: requests as messages or already encoded; the handler sees messages
            from starforge_api.control.v1 import blob_service_pb2

            def decoded() -> Iterator[Any]:
                for r in requests:
                    yield blob_service_pb2.UploadBlobsRequest.FromString(r) if isinstance(r, bytes) else r

            return self.blobs.UploadBlobs(decoded())

        self.blob_upload = blob_upload

    def call(self, rpc: Callable[..., Any], request: Any, *, timeout: float | None = None) -> Any:
        try:
            return rpc(request)
        except grpc.RpcError as err:
            raise self.error(err) from None

    def streaming(self) -> FakeClient:  # as Client.streaming: streams go through the same client
        return self

    def stream(self, rpc: Callable[..., Any], request: Any) -> Any:
        return rpc(request)

    def client_stream(self, rpc: Callable[..., Any], requests: Iterator[Any]) -> Any:
        return self.call(rpc, requests)

    def error(self, err: grpc.RpcError) -> CliError:
        return from_rpc(err, self.address, connected=self.connected)
