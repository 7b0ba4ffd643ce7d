"""The one error tree of StarForge.

Domain code raises these; `common.rpc_status` maps them to gRPC status codes with rich
google.rpc details in one interceptor, and `common.rpc_status.describe` turns a received status
back into one readable message for the CLI. Nothing else in the code base builds gRPC statuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
from starforge_api.control.v1 import error_reason_pb2

Reason = int  # a starforge.control.v1.ErrorReason value


@dataclass(frozen=True)
class FieldViolation:
    """A bad request field (google.rpc.BadRequest.FieldViolation)."""

    field: str
    description: str


@dataclass(frozen=True)
class PreconditionViolation:
    """A failed precondition (google.rpc.PreconditionFailure.Violation)."""

    type: str
    subject: str
    description: str


@dataclass(frozen=True)
class QuotaViolation:
    """An exceeded quota (google.rpc.QuotaFailure.Violation)."""

    subject: str
    description: str


@dataclass
class StarforgeError(Exception):
    """Base of every error StarForge reports to a caller.

    `message` is the one sentence a user sees; it must say what is wrong and, when there is one,
    the fix. Details carry the same facts in machine-readable form.
    """

    message: str
    reason: Reason = error_reason_pb2.ERROR_REASON_INTERNAL
    metadata: Mapping[str, str] = field(default_factory=dict)
    field_violations: tuple[FieldViolation, ...] = ()
    precondition_violations: tuple[PreconditionViolation, ...] = ()
    quota_violations: tuple[QuotaViolation, ...] = ()
    retry_after_seconds: float | None = None

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    @property
    def reason_name(self) -> str:
        """ErrorReason name without its prefix, e.g. "STALE_RECIPE_LOCK"."""
        name = error_reason_pb2.ErrorReason.Name(self.reason)
        return name.removeprefix("ERROR_REASON_")


@dataclass
class InvalidArgument(StarforgeError):
    """The request is malformed. Carries BadRequest field violations."""

    reason: Reason = error_reason_pb2.ERROR_REASON_INVALID_ARGUMENT
    code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT


@dataclass
class NotFound(StarforgeError):
    """The object does not exist, or the caller may not know that it does."""

    reason: Reason = error_reason_pb2.ERROR_REASON_NOT_FOUND
    code: grpc.StatusCode = grpc.StatusCode.NOT_FOUND


@dataclass
class AlreadyExists(StarforgeError):
    """The object exists."""

    reason: Reason = error_reason_pb2.ERROR_REASON_ALREADY_EXISTS
    code: grpc.StatusCode = grpc.StatusCode.ALREADY_EXISTS


@dataclass
class FailedPrecondition(StarforgeError):
    """The system is not in a state that allows the operation. Carries PreconditionFailure."""

    reason: Reason = error_reason_pb2.ERROR_REASON_ILLEGAL_TRANSITION
    code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION


@dataclass
class PermissionDenied(StarforgeError):
    """The caller is known but may not do this."""

    reason: Reason = error_reason_pb2.ERROR_REASON_FORBIDDEN
    code: grpc.StatusCode = grpc.StatusCode.PERMISSION_DENIED


@dataclass
class Unauthenticated(StarforgeError):
    """No valid credentials."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BAD_TOKEN
    code: grpc.StatusCode = grpc.StatusCode.UNAUTHENTICATED


@dataclass
class ResourceExhausted(StarforgeError):
    """Out of a resource (GPUs, quota, server capacity). Carries QuotaFailure and RetryInfo."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED


@dataclass
class Unavailable(StarforgeError):
    """A dependency (executor, backend, database) cannot be reached; retrying may help."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE


@dataclass
class Internal(StarforgeError):
    """A bug. The message carries an incident id that is also in the server log."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


@dataclass
class DeadlineExceeded(StarforgeError):
    """A call to a dependency ran past its deadline."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = grpc.StatusCode.DEADLINE_EXCEEDED


_BY_CODE: dict[grpc.StatusCode, type[StarforgeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def error_class_for(code: grpc.StatusCode) -> type[StarforgeError]:
    """The error class that a status code maps back to (Internal for the rest)."""
    return _BY_CODE.get(code, Internal)
