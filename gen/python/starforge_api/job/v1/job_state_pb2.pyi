from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_SUBMITTED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_STOPPED: _ClassVar[JobState]
    JOB_STATE_PAUSED: _ClassVar[JobState]

class DesiredState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DESIRED_STATE_UNSPECIFIED: _ClassVar[DesiredState]
    DESIRED_STATE_STOP: _ClassVar[DesiredState]
    DESIRED_STATE_PAUSE: _ClassVar[DesiredState]

class WaitReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WAIT_REASON_UNSPECIFIED: _ClassVar[WaitReason]
    WAIT_REASON_PRIORITY: _ClassVar[WaitReason]
    WAIT_REASON_QUOTA: _ClassVar[WaitReason]
    WAIT_REASON_CAPACITY: _ClassVar[WaitReason]
    WAIT_REASON_WINDOW: _ClassVar[WaitReason]
    WAIT_REASON_DEPENDENCY: _ClassVar[WaitReason]
    WAIT_REASON_DRAIN: _ClassVar[WaitReason]
    WAIT_REASON_RETRY_BACKOFF: _ClassVar[WaitReason]

class FailureClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_CLASS_UNSPECIFIED: _ClassVar[FailureClass]
    FAILURE_CLASS_USER_CODE: _ClassVar[FailureClass]
    FAILURE_CLASS_OUT_OF_MEMORY: _ClassVar[FailureClass]
    FAILURE_CLASS_IMAGE: _ClassVar[FailureClass]
    FAILURE_CLASS_DATA: _ClassVar[FailureClass]
    FAILURE_CLASS_NODE_LOST: _ClassVar[FailureClass]
    FAILURE_CLASS_PRECHECK: _ClassVar[FailureClass]
    FAILURE_CLASS_INFRA: _ClassVar[FailureClass]
    FAILURE_CLASS_PREEMPTED: _ClassVar[FailureClass]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_SUBMITTED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_STOPPED: JobState
JOB_STATE_PAUSED: JobState
DESIRED_STATE_UNSPECIFIED: DesiredState
DESIRED_STATE_STOP: DesiredState
DESIRED_STATE_PAUSE: DesiredState
WAIT_REASON_UNSPECIFIED: WaitReason
WAIT_REASON_PRIORITY: WaitReason
WAIT_REASON_QUOTA: WaitReason
WAIT_REASON_CAPACITY: WaitReason
WAIT_REASON_WINDOW: WaitReason
WAIT_REASON_DEPENDENCY: WaitReason
WAIT_REASON_DRAIN: WaitReason
WAIT_REASON_RETRY_BACKOFF: WaitReason
FAILURE_CLASS_UNSPECIFIED: FailureClass
FAILURE_CLASS_USER_CODE: FailureClass
FAILURE_CLASS_OUT_OF_MEMORY: FailureClass
FAILURE_CLASS_IMAGE: FailureClass
FAILURE_CLASS_DATA: FailureClass
FAILURE_CLASS_NODE_LOST: FailureClass
FAILURE_CLASS_PRECHECK: FailureClass
FAILURE_CLASS_INFRA: FailureClass
FAILURE_CLASS_PREEMPTED: FailureClass
