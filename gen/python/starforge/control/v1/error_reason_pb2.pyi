from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_TOKEN: _ClassVar[ErrorReason]
    ERROR_REASON_FORBIDDEN: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_STALE_RECIPE_LOCK: _ClassVar[ErrorReason]
    ERROR_REASON_UNKNOWN_METHOD: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_OVERRIDE: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_PROFILE: _ClassVar[ErrorReason]
    ERROR_REASON_IMAGE_NOT_ALLOWED: _ClassVar[ErrorReason]
    ERROR_REASON_HF_PRECHECK: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_BATCH_SIZE: _ClassVar[ErrorReason]
    ERROR_REASON_MISSING_INPUT: _ClassVar[ErrorReason]
    ERROR_REASON_NO_FLEET: _ClassVar[ErrorReason]
    ERROR_REASON_ILLEGAL_TRANSITION: _ClassVar[ErrorReason]
    ERROR_REASON_MISSING_BLOB: _ClassVar[ErrorReason]
    ERROR_REASON_SENSITIVE_FILE: _ClassVar[ErrorReason]
    ERROR_REASON_BACKEND_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
    ERROR_REASON_TOKEN_SCOPE: _ClassVar[ErrorReason]
    ERROR_REASON_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_NODE_IDENTITY: _ClassVar[ErrorReason]
    ERROR_REASON_MESSAGE_TOO_LARGE: _ClassVar[ErrorReason]
    ERROR_REASON_JOIN_TOKEN_USED: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_BAD_TOKEN: ErrorReason
ERROR_REASON_FORBIDDEN: ErrorReason
ERROR_REASON_NOT_FOUND: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_STALE_RECIPE_LOCK: ErrorReason
ERROR_REASON_UNKNOWN_METHOD: ErrorReason
ERROR_REASON_BAD_OVERRIDE: ErrorReason
ERROR_REASON_BAD_PROFILE: ErrorReason
ERROR_REASON_IMAGE_NOT_ALLOWED: ErrorReason
ERROR_REASON_HF_PRECHECK: ErrorReason
ERROR_REASON_BAD_BATCH_SIZE: ErrorReason
ERROR_REASON_MISSING_INPUT: ErrorReason
ERROR_REASON_NO_FLEET: ErrorReason
ERROR_REASON_ILLEGAL_TRANSITION: ErrorReason
ERROR_REASON_MISSING_BLOB: ErrorReason
ERROR_REASON_SENSITIVE_FILE: ErrorReason
ERROR_REASON_BACKEND_UNAVAILABLE: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_TOKEN_SCOPE: ErrorReason
ERROR_REASON_ALREADY_EXISTS: ErrorReason
ERROR_REASON_NODE_IDENTITY: ErrorReason
ERROR_REASON_MESSAGE_TOO_LARGE: ErrorReason
ERROR_REASON_JOIN_TOKEN_USED: ErrorReason
