"""StarforgeError <-> gRPC status with rich details, in one place.

Servers install `ErrorInterceptor`: a StarforgeError raised by a handler becomes its status code,
its message, and google.rpc details (ErrorInfo, BadRequest, PreconditionFailure, QuotaFailure,
RetryInfo); any other exception becomes INTERNAL with an incident id and is logged with its
traceback here, never sent. Clients call `from_rpc_error` to get the StarforgeError back.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from starforge_api.control.v1 import error_reason_pb2

from common import errors

DOMAIN = "starforge.dev"
log = logging.getLogger("starforge.rpc")


def to_status(err: errors.StarforgeError) -> status_pb2.Status:
    """The google.rpc.Status for an error, with its details packed."""
    details: list[Any] = [
        error_details_pb2.ErrorInfo(reason=err.reason_name, domain=DOMAIN, metadata=dict(err.metadata))
    ]
    if err.field_violations:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                    for v in err.field_violations
                ]
            )
        )
    if err.precondition_violations:
        details.append(
            error_details_pb2.PreconditionFailure(
                violations=[
                    error_details_pb2.PreconditionFailure.Violation(
                        type=v.type, subject=v.subject, description=v.description
                    )
                    for v in err.precondition_violations
                ]
            )
        )
    if err.quota_violations:
        details.append(
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(subject=v.subject, description=v.description)
                    for v in err.quota_violations
                ]
            )
        )
    if err.retry_after_seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(err.retry_after_seconds * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    return status_pb2.Status(code=err.code.value[0], message=err.message, details=packed)


def to_grpc_status(err: errors.StarforgeError) -> grpc.Status:
    """The grpc.Status (code, message, trailing metadata) for an error."""
    return rpc_status.to_status(to_status(err))


def internal_error(exc: BaseException) -> errors.Internal:
    """Log an unexpected exception with an incident id and return what the caller may see."""
    incident = secrets.token_hex(4)
    log.error("unexpected error, incident %s", incident, exc_info=exc)
    return errors.Internal(f"internal error in the StarForge server (incident {incident}; see the server log)")


def from_rpc_error(err: grpc.RpcError) -> errors.StarforgeError:
    """Rebuild the StarforgeError a server sent (or a transport error seen by the client)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(code)
    status = None
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError, TypeError):
        status = None
    cls = errors.error_class_for(code)
    kwargs: dict[str, Any] = {}
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                name = "ERROR_REASON_" + info.reason
                if name in error_reason_pb2.ErrorReason.keys():  # noqa: SIM118 - EnumTypeWrapper has no __contains__
                    kwargs["reason"] = error_reason_pb2.ErrorReason.Value(name)
                kwargs["metadata"] = dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                kwargs["field_violations"] = tuple(
                    errors.FieldViolation(v.field, v.description) for v in bad.field_violations
                )
            elif detail.Is(error_details_pb2.PreconditionFailure.DESCRIPTOR):
                pre = error_details_pb2.PreconditionFailure()
                detail.Unpack(pre)
                kwargs["precondition_violations"] = tuple(
                    errors.PreconditionViolation(v.type, v.subject, v.description) for v in pre.violations
                )
            elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
                quota = error_details_pb2.QuotaFailure()
                detail.Unpack(quota)
                kwargs["quota_violations"] = tuple(
                    errors.QuotaViolation(v.subject, v.description) for v in quota.violations
                )
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                kwargs["retry_after_seconds"] = retry.retry_delay.ToNanoseconds() / 1e9
    return cls(message, **kwargs)


assert code_pb2.OK == 0  # google.rpc codes and grpc.StatusCode share numbering

Handler = Callable[..., Any]


def status_for(exc: Exception) -> grpc.Status:
    """The status a handler's exception ends its call with: a StarforgeError's own, anything else
    an internal error (logged with an incident id). Every server's handlers map through this."""
    return to_grpc_status(exc if isinstance(exc, errors.StarforgeError) else internal_error(exc))


def _wrap_unary(behavior: Handler) -> Handler:
    async def wrapper(request: Any, context: Any) -> Any:
        try:
            return await behavior(request, context)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await context.abort_with_status(status_for(exc))

    return wrapper


def _wrap_stream(behavior: Handler) -> Handler:
    async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            async for item in behavior(request, context):
                yield item
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await context.abort_with_status(status_for(exc))

    return wrapper


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Maps exceptions from every handler to a gRPC status (see module docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary(handler.stream_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_stream(handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
