"""Authentication of every gRPC call, shared by the control plane, executor services and forgelet.

`AuthnInterceptor` resolves the caller from the call's metadata in `intercept_service`, BEFORE the
request body is received or parsed. A refused call gets a handler that reads no request message
at all (a request-streaming handler that fails at once), so an unauthenticated client cannot make
the server buffer or deserialize a large body. An accepted call's handler gets the identity bound
(`bind`) for its whole run.

Every method (public ones too) also has a receive limit: `DEFAULT_RECEIVE_BYTES` unless raised
for that method in `limits`. The limit is checked on the raw bytes before they are parsed; a
larger message is RESOURCE_EXHAUSTED. The server-wide gRPC limit (`create_server`'s
`max_receive_bytes`) must be at least the largest per-method limit: it is what stops the
transport from buffering anything larger.

Static bearer tokens (executor services, forgelet) are compared with `hmac.compare_digest`
(`static_token`), so a wrong token takes as long to refuse whatever prefix it shares.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from starforge_api.control.v1 import error_reason_pb2

from common import errors
from common.channel import token_from_metadata
from common.rpc_status import internal_error
from common.server import DEFAULT_RECEIVE_BYTES

# (full method name, bearer token or None) -> the caller's identity; raises a StarforgeError to refuse.
Resolve = Callable[[str, str | None], Awaitable[Any]]
Handler = Callable[..., Any]


@dataclass(frozen=True)
class Oversize:
    """What the size-checking deserializer returns instead of parsing a message over its limit."""

    size: int
    limit: int


@dataclass(frozen=True)
class Unparsable:
    """What the checking deserializer returns for bytes that are not a message of the method's
    request type: the handler refuses it with INVALID_ARGUMENT (not an internal error, which
    would log a traceback for each such message a caller sends)."""


def static_token(expected: Callable[[], str], what: str) -> Resolve:
    """A resolver that accepts exactly the token `expected()` (read per call: rotated files work)."""

    async def resolve(method: str, token: str | None) -> str:
        want = expected()
        if not want or token is None or not hmac.compare_digest(token.encode(), want.encode()):
            raise errors.Unauthenticated(f"the {what} token is missing or wrong")
        return what

    return resolve


def checked(deserializer: Callable[[bytes], Any] | None, limit: int) -> Callable[[bytes], Any]:
    """`deserializer` that never raises: an `Oversize` for a message over `limit` bytes (not
    parsed), an `Unparsable` for one that does not parse; `refuse_unreadable` refuses either."""

    def parse(data: bytes) -> Any:
        if len(data) > limit:
            return Oversize(len(data), limit)
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except DecodeError:
            return Unparsable()

    return parse


def refuse_unreadable(request: Any, method: str) -> None:
    """Raise the caller's error for what `checked` could not give as a message."""
    name = method.rsplit("/", 1)[-1]
    if isinstance(request, Oversize):
        raise errors.ResourceExhausted(
            f"the {name} message is {request.size} bytes; this server accepts at most {request.limit} bytes for it",
            reason=error_reason_pb2.ERROR_REASON_MESSAGE_TOO_LARGE,
        )
    if isinstance(request, Unparsable):
        raise errors.InvalidArgument(f"the {name} message does not parse as its request type")


def _refusal(error: errors.StarforgeError) -> Any:
    """A handler that fails with `error` without reading the request (its deserializer never runs)."""

    async def refuse(request_iterator: Any, context: Any) -> Any:
        raise error

    return grpc.stream_unary_rpc_method_handler(refuse, request_deserializer=lambda data: None)


class AuthnInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Resolves the caller before the body is read; enforces per-method receive limits (module docstring).

    `protects(method)` says which methods need an identity (others, like health and reflection,
    are public); `bind(identity)` is called in the handler's context before it runs, so that a
    servicer can read the caller (e.g. a context variable).
    """

    def __init__(
        self,
        resolve: Resolve,
        *,
        protects: Callable[[str], bool],
        bind: Callable[[Any], object] | None = None,
        limits: Mapping[str, int] | None = None,
        default_limit: int = DEFAULT_RECEIVE_BYTES,
    ) -> None:
        self.resolve = resolve
        self.protects = protects
        self.bind = bind
        self.limits = dict(limits or {})
        self.default_limit = default_limit

    @property
    def max_receive_bytes(self) -> int:
        """The largest message any method accepts: the transport limit the server should set."""
        return max([self.default_limit, *self.limits.values()])

    def limit(self, method: str) -> int:
        return self.limits.get(method, self.default_limit)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        method = details.method
        identity: Any = None
        protected = self.protects(method)
        if protected:
            try:
                identity = await self.resolve(method, token_from_metadata(details.invocation_metadata))
            except errors.StarforgeError as err:
                return _refusal(err)
            except Exception as exc:  # e.g. an unreadable token file: logged with an incident id
                return _refusal(internal_error(exc))
        handler = await continuation(details)
        if handler is None:
            return None
        return self._wrap(handler, method, identity if protected else None, protected)

    def _wrap(self, handler: Any, method: str, identity: Any, bound: bool) -> Any:
        bind = self.bind if bound else None

        def unary(behavior: Handler) -> Handler:
            async def wrapper(request: Any, context: Any) -> Any:
                refuse_unreadable(request, method)
                if bind is not None:
                    bind(identity)
                return await behavior(request, context)

            return wrapper

        def stream(behavior: Handler) -> Handler:
            async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
                refuse_unreadable(request, method)
                if bind is not None:
                    bind(identity)
                async for item in behavior(request, context):
                    yield item

            return wrapper

        def requests(behavior: Handler, out: Callable[[Handler], Handler]) -> Handler:
            async def checked(request_iterator: AsyncIterator[Any]) -> AsyncIterator[Any]:
                async for request in request_iterator:
                    refuse_unreadable(request, method)
                    yield request

            return out(lambda request_iterator, context: behavior(checked(request_iterator), context))

        kw = {
            "request_deserializer": checked(handler.request_deserializer, self.limit(method)),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(stream(handler.unary_stream), **kw)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(requests(handler.stream_unary, unary), **kw)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(requests(handler.stream_stream, stream), **kw)
        return handler


def everything_under(*prefixes: str) -> Callable[[str], bool]:
    """`protects` for "every method of these services (full-name prefixes)"."""
    return lambda method: method.startswith(prefixes)
