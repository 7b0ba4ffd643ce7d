"""The one error tree of StarForge.

Domain code raises these; `common.rpc_status` maps them to gRPC status codes with rich
google.rpc details in one interceptor, and `common.rpc_status.describe` turns a received status
back into one readable message for the CLI. Nothing else in the code base builds gRPC statuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starforge_api.control.v1 import error_reason_pb2

if TYPE_CHECKING:
    import grpc

Reason = int  # a starforge.control.v1.ErrorReason value


def _code(name: str) -> Callable[[], grpc.StatusCode]:
    """The default of an error's `code`: grpc's status code `name`, looked up when an error is made.

    grpcio is imported then, not with this module: `sf submit` checks overrides with these errors
    (recipes.params) and, for an unchanged lab, talks to the console without grpcio (its import is
    ~65 ms of CPU, docs/benchmarks.md, **packaging**)."""

    def code() -> grpc.StatusCode:
        import grpc

        return grpc.StatusCode[name]

    return code


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

    code: grpc.StatusCode = field(default_factory=_code("INTERNAL"))

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
    code: grpc.StatusCode = field(default_factory=_code("INVALID_ARGUMENT"))


@dataclass
class NotFound(StarforgeError):
    """The object does not exist, or the caller may not know that it does."""

    reason: Reason = error_reason_pb2.ERROR_REASON_NOT_FOUND
    code: grpc.StatusCode = field(default_factory=_code("NOT_FOUND"))


@dataclass
class AlreadyExists(StarforgeError):
    """The object exists."""

    reason: Reason = error_reason_pb2.ERROR_REASON_ALREADY_EXISTS
    code: grpc.StatusCode = field(default_factory=_code("ALREADY_EXISTS"))


@dataclass
class FailedPrecondition(StarforgeError):
    """The system is not in a state that allows the operation. Carries PreconditionFailure."""

    reason: Reason = error_reason_pb2.ERROR_REASON_ILLEGAL_TRANSITION
    code: grpc.StatusCode = field(default_factory=_code("FAILED_PRECONDITION"))


@dataclass
class PermissionDenied(StarforgeError):
    """The caller is known but may not do this."""

    reason: Reason = error_reason_pb2.ERROR_REASON_FORBIDDEN
    code: grpc.StatusCode = field(default_factory=_code("PERMISSION_DENIED"))


@dataclass
class Unauthenticated(StarforgeError):
    """No valid credentials."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BAD_TOKEN
    code: grpc.StatusCode = field(default_factory=_code("UNAUTHENTICATED"))


@dataclass
class ResourceExhausted(StarforgeError):
    """Out of a resource (GPUs, quota, server capacity). Carries QuotaFailure and RetryInfo."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = field(default_factory=_code("RESOURCE_EXHAUSTED"))


@dataclass
class Unavailable(StarforgeError):
    """A dependency (executor, backend, database) cannot be reached; retrying may help."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = field(default_factory=_code("UNAVAILABLE"))


@dataclass
class Internal(StarforgeError):
    """A bug. The message carries an incident id that is also in the server log."""

    code: grpc.StatusCode = field(default_factory=_code("INTERNAL"))


@dataclass
class DeadlineExceeded(StarforgeError):
    """A call to a dependency ran past its deadline."""

    reason: Reason = error_reason_pb2.ERROR_REASON_BACKEND_UNAVAILABLE
    code: grpc.StatusCode = field(default_factory=_code("DEADLINE_EXCEEDED"))


_BY_CODE_NAME: dict[str, type[StarforgeError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "FAILED_PRECONDITION": FailedPrecondition,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAUTHENTICATED": Unauthenticated,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
}


def error_class_for(code: grpc.StatusCode) -> type[StarforgeError]:
    """The error class that a status code maps back to (Internal for the rest)."""
    import grpc

    return _BY_CODE_NAME.get(code.name, Internal) if isinstance(code, grpc.StatusCode) else Internal
