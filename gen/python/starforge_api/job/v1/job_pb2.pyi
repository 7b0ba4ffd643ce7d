import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.job.v1 import job_spec_pb2 as _job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as _job_state_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_SOURCE_UNSPECIFIED: _ClassVar[ImageSource]
    IMAGE_SOURCE_SUBMISSION: _ClassVar[ImageSource]
    IMAGE_SOURCE_CONSOLE_DEFAULT: _ClassVar[ImageSource]
    IMAGE_SOURCE_RUNTIME_REGISTRY: _ClassVar[ImageSource]
    IMAGE_SOURCE_CATALOG: _ClassVar[ImageSource]
    IMAGE_SOURCE_HOST_RUNTIME: _ClassVar[ImageSource]

class AttemptCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_CAUSE_UNSPECIFIED: _ClassVar[AttemptCause]
    ATTEMPT_CAUSE_INITIAL: _ClassVar[AttemptCause]
    ATTEMPT_CAUSE_AUTO_RETRY: _ClassVar[AttemptCause]
    ATTEMPT_CAUSE_USER_RETRY: _ClassVar[AttemptCause]
    ATTEMPT_CAUSE_RESUME: _ClassVar[AttemptCause]
IMAGE_SOURCE_UNSPECIFIED: ImageSource
IMAGE_SOURCE_SUBMISSION: ImageSource
IMAGE_SOURCE_CONSOLE_DEFAULT: ImageSource
IMAGE_SOURCE_RUNTIME_REGISTRY: ImageSource
IMAGE_SOURCE_CATALOG: ImageSource
IMAGE_SOURCE_HOST_RUNTIME: ImageSource
ATTEMPT_CAUSE_UNSPECIFIED: AttemptCause
ATTEMPT_CAUSE_INITIAL: AttemptCause
ATTEMPT_CAUSE_AUTO_RETRY: AttemptCause
ATTEMPT_CAUSE_USER_RETRY: AttemptCause
ATTEMPT_CAUSE_RESUME: AttemptCause

class Job(_message.Message):
    __slots__ = ("job_id", "owner", "project", "experiment", "method", "state", "spec", "pools", "wait", "attempts", "diagnosis", "create_time", "update_time", "start_time", "end_time", "image", "provenance", "resolved_config_json", "fleet", "parent_job_id", "stage", "retries_used", "retry_budget", "out_dir", "labels", "image_source", "image_source_detail", "framework_version", "runtime_id", "warnings")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSIS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    RETRIES_USED_FIELD_NUMBER: _ClassVar[int]
    RETRY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    OUT_DIR_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SOURCE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    owner: str
    project: str
    experiment: str
    method: str
    state: _job_state_pb2.JobState
    spec: _job_spec_pb2.JobSpec
    pools: _containers.RepeatedCompositeFieldContainer[_job_spec_pb2.Pool]
    wait: WaitInfo
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    diagnosis: Diagnosis
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    image: str
    provenance: _job_spec_pb2.Provenance
    resolved_config_json: str
    fleet: str
    parent_job_id: str
    stage: str
    retries_used: int
    retry_budget: int
    out_dir: str
    labels: _containers.ScalarMap[str, str]
    image_source: ImageSource
    image_source_detail: str
    framework_version: str
    runtime_id: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., owner: _Optional[str] = ..., project: _Optional[str] = ..., experiment: _Optional[str] = ..., method: _Optional[str] = ..., state: _Optional[_Union[_job_state_pb2.JobState, str]] = ..., spec: _Optional[_Union[_job_spec_pb2.JobSpec, _Mapping]] = ..., pools: _Optional[_Iterable[_Union[_job_spec_pb2.Pool, _Mapping]]] = ..., wait: _Optional[_Union[WaitInfo, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., diagnosis: _Optional[_Union[Diagnosis, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., image: _Optional[str] = ..., provenance: _Optional[_Union[_job_spec_pb2.Provenance, _Mapping]] = ..., resolved_config_json: _Optional[str] = ..., fleet: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., stage: _Optional[str] = ..., retries_used: _Optional[int] = ..., retry_budget: _Optional[int] = ..., out_dir: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., image_source: _Optional[_Union[ImageSource, str]] = ..., image_source_detail: _Optional[str] = ..., framework_version: _Optional[str] = ..., runtime_id: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class WaitInfo(_message.Message):
    __slots__ = ("reason", "message", "queue_position", "queue")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    reason: _job_state_pb2.WaitReason
    message: str
    queue_position: int
    queue: str
    def __init__(self, reason: _Optional[_Union[_job_state_pb2.WaitReason, str]] = ..., message: _Optional[str] = ..., queue_position: _Optional[int] = ..., queue: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt_id", "number", "state", "cause", "fleet", "executor_kind", "backend_handle", "node", "create_time", "start_time", "end_time", "exit_code", "failure_class", "reason", "capsule_digest")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_KIND_FIELD_NUMBER: _ClassVar[int]
    BACKEND_HANDLE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAPSULE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    number: int
    state: _job_state_pb2.JobState
    cause: AttemptCause
    fleet: str
    executor_kind: str
    backend_handle: str
    node: str
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    exit_code: int
    failure_class: _job_state_pb2.FailureClass
    reason: str
    capsule_digest: str
    def __init__(self, attempt_id: _Optional[str] = ..., number: _Optional[int] = ..., state: _Optional[_Union[_job_state_pb2.JobState, str]] = ..., cause: _Optional[_Union[AttemptCause, str]] = ..., fleet: _Optional[str] = ..., executor_kind: _Optional[str] = ..., backend_handle: _Optional[str] = ..., node: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., failure_class: _Optional[_Union[_job_state_pb2.FailureClass, str]] = ..., reason: _Optional[str] = ..., capsule_digest: _Optional[str] = ...) -> None: ...

class Diagnosis(_message.Message):
    __slots__ = ("failure_class", "summary", "hint", "log_tail", "exit_code", "retryable")
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    failure_class: _job_state_pb2.FailureClass
    summary: str
    hint: str
    log_tail: _containers.RepeatedScalarFieldContainer[str]
    exit_code: int
    retryable: bool
    def __init__(self, failure_class: _Optional[_Union[_job_state_pb2.FailureClass, str]] = ..., summary: _Optional[str] = ..., hint: _Optional[str] = ..., log_tail: _Optional[_Iterable[str]] = ..., exit_code: _Optional[int] = ..., retryable: _Optional[bool] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "attempt_id", "from_state", "to_state", "time", "reason", "sequence", "attempt_only")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ONLY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    from_state: _job_state_pb2.JobState
    to_state: _job_state_pb2.JobState
    time: _timestamp_pb2.Timestamp
    reason: str
    sequence: int
    attempt_only: bool
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., from_state: _Optional[_Union[_job_state_pb2.JobState, str]] = ..., to_state: _Optional[_Union[_job_state_pb2.JobState, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., sequence: _Optional[int] = ..., attempt_only: _Optional[bool] = ...) -> None: ...
