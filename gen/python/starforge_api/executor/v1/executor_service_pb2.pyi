import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.executor.v1 import launch_request_pb2 as _launch_request_pb2
from starforge_api.job.v1 import artifact_pb2 as _artifact_pb2
from starforge_api.job.v1 import job_state_pb2 as _job_state_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutorCapability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_CAPABILITY_UNSPECIFIED: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_MULTI_POOL: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_PAUSE: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_GPUS: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_MULTI_NODE: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_IMAGES: _ClassVar[ExecutorCapability]
    EXECUTOR_CAPABILITY_ARTIFACTS: _ClassVar[ExecutorCapability]
EXECUTOR_CAPABILITY_UNSPECIFIED: ExecutorCapability
EXECUTOR_CAPABILITY_MULTI_POOL: ExecutorCapability
EXECUTOR_CAPABILITY_PAUSE: ExecutorCapability
EXECUTOR_CAPABILITY_GPUS: ExecutorCapability
EXECUTOR_CAPABILITY_MULTI_NODE: ExecutorCapability
EXECUTOR_CAPABILITY_IMAGES: ExecutorCapability
EXECUTOR_CAPABILITY_ARTIFACTS: ExecutorCapability

class SeriesInventory(_message.Message):
    __slots__ = ("series", "nodes", "gpus_per_node", "free_gpus")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    FREE_GPUS_FIELD_NUMBER: _ClassVar[int]
    series: str
    nodes: int
    gpus_per_node: int
    free_gpus: int
    def __init__(self, series: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., free_gpus: _Optional[int] = ...) -> None: ...

class DescribeCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeCapabilitiesResponse(_message.Message):
    __slots__ = ("kind", "capabilities", "inventory", "runtime", "version")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    capabilities: _containers.RepeatedScalarFieldContainer[ExecutorCapability]
    inventory: _containers.RepeatedCompositeFieldContainer[SeriesInventory]
    runtime: str
    version: str
    def __init__(self, kind: _Optional[str] = ..., capabilities: _Optional[_Iterable[_Union[ExecutorCapability, str]]] = ..., inventory: _Optional[_Iterable[_Union[SeriesInventory, _Mapping]]] = ..., runtime: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class LaunchResponse(_message.Message):
    __slots__ = ("backend_handle", "already_launched", "node", "image_digest", "out_dir")
    BACKEND_HANDLE_FIELD_NUMBER: _ClassVar[int]
    ALREADY_LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUT_DIR_FIELD_NUMBER: _ClassVar[int]
    backend_handle: str
    already_launched: bool
    node: str
    image_digest: str
    out_dir: str
    def __init__(self, backend_handle: _Optional[str] = ..., already_launched: _Optional[bool] = ..., node: _Optional[str] = ..., image_digest: _Optional[str] = ..., out_dir: _Optional[str] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("attempt_ids",)
    ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("attempt_id", "state", "not_found", "exit_code", "message", "log_tail", "backend_handle", "node", "start_time", "end_time", "failure_class", "image_digest")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_HANDLE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    state: _job_state_pb2.JobState
    not_found: bool
    exit_code: int
    message: str
    log_tail: _containers.RepeatedScalarFieldContainer[str]
    backend_handle: str
    node: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    failure_class: _job_state_pb2.FailureClass
    image_digest: str
    def __init__(self, attempt_id: _Optional[str] = ..., state: _Optional[_Union[_job_state_pb2.JobState, str]] = ..., not_found: _Optional[bool] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., log_tail: _Optional[_Iterable[str]] = ..., backend_handle: _Optional[str] = ..., node: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_class: _Optional[_Union[_job_state_pb2.FailureClass, str]] = ..., image_digest: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("observations",)
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    def __init__(self, observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("attempt_id", "grace_seconds")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    grace_seconds: int
    def __init__(self, attempt_id: _Optional[str] = ..., grace_seconds: _Optional[int] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...

class CleanupRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class CleanupResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class ListAttemptsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAttemptsResponse(_message.Message):
    __slots__ = ("observations",)
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    def __init__(self, observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ("attempt_id", "out_key", "node", "page_size", "page_token")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    OUT_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    out_key: str
    node: str
    page_size: int
    page_token: str
    def __init__(self, attempt_id: _Optional[str] = ..., out_key: _Optional[str] = ..., node: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    next_page_token: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReadArtifactRequest(_message.Message):
    __slots__ = ("attempt_id", "out_key", "node", "path", "offset")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    OUT_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    out_key: str
    node: str
    path: str
    offset: int
    def __init__(self, attempt_id: _Optional[str] = ..., out_key: _Optional[str] = ..., node: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class ReadArtifactResponse(_message.Message):
    __slots__ = ("offset", "data", "size")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    size: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...
