import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.job.v1 import job_state_pb2 as _job_state_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LifecyclePhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIFECYCLE_PHASE_UNSPECIFIED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_RUNNER_STARTED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_COMMAND_STARTED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_COMMAND_EXITED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_RUNNER_FAILED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_CHECKPOINT_SAVED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_SIGNALLED: _ClassVar[LifecyclePhase]
LIFECYCLE_PHASE_UNSPECIFIED: LifecyclePhase
LIFECYCLE_PHASE_RUNNER_STARTED: LifecyclePhase
LIFECYCLE_PHASE_COMMAND_STARTED: LifecyclePhase
LIFECYCLE_PHASE_COMMAND_EXITED: LifecyclePhase
LIFECYCLE_PHASE_RUNNER_FAILED: LifecyclePhase
LIFECYCLE_PHASE_CHECKPOINT_SAVED: LifecyclePhase
LIFECYCLE_PHASE_SIGNALLED: LifecyclePhase

class LifecycleEvent(_message.Message):
    __slots__ = ("phase", "time", "exit_code", "signal", "message", "failure_class", "details")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PHASE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    phase: LifecyclePhase
    time: _timestamp_pb2.Timestamp
    exit_code: int
    signal: int
    message: str
    failure_class: _job_state_pb2.FailureClass
    details: _containers.ScalarMap[str, str]
    def __init__(self, phase: _Optional[_Union[LifecyclePhase, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., message: _Optional[str] = ..., failure_class: _Optional[_Union[_job_state_pb2.FailureClass, str]] = ..., details: _Optional[_Mapping[str, str]] = ...) -> None: ...
