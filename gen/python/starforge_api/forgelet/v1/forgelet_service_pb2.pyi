from starforge_api.executor.v1 import executor_service_pb2 as _executor_service_pb2
from starforge_api.executor.v1 import launch_request_pb2 as _launch_request_pb2
from starforge_api.forgelet.v1 import node_pb2 as _node_pb2
from starforge_api.job.v1 import artifact_pb2 as _artifact_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetNodeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _node_pb2.Node
    def __init__(self, node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ...) -> None: ...

class StartAttemptRequest(_message.Message):
    __slots__ = ("launch", "gpu_indices")
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    launch: _launch_request_pb2.LaunchRequest
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, launch: _Optional[_Union[_launch_request_pb2.LaunchRequest, _Mapping]] = ..., gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class StartAttemptResponse(_message.Message):
    __slots__ = ("container_id", "already_started")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    ALREADY_STARTED_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    already_started: bool
    def __init__(self, container_id: _Optional[str] = ..., already_started: _Optional[bool] = ...) -> None: ...

class InspectAttemptsRequest(_message.Message):
    __slots__ = ("attempt_ids",)
    ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class InspectAttemptsResponse(_message.Message):
    __slots__ = ("observations",)
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    observations: _containers.RepeatedCompositeFieldContainer[_executor_service_pb2.Observation]
    def __init__(self, observations: _Optional[_Iterable[_Union[_executor_service_pb2.Observation, _Mapping]]] = ...) -> None: ...

class StopAttemptRequest(_message.Message):
    __slots__ = ("attempt_id", "grace_seconds")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    grace_seconds: int
    def __init__(self, attempt_id: _Optional[str] = ..., grace_seconds: _Optional[int] = ...) -> None: ...

class StopAttemptResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...

class RemoveAttemptRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class RemoveAttemptResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("stopped_attempt_ids",)
    STOPPED_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    stopped_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stopped_attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ("out_key", "page_size", "page_token")
    OUT_KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    out_key: str
    page_size: int
    page_token: str
    def __init__(self, out_key: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    next_page_token: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReadArtifactRequest(_message.Message):
    __slots__ = ("out_key", "path", "offset")
    OUT_KEY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    out_key: str
    path: str
    offset: int
    def __init__(self, out_key: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class ReadArtifactResponse(_message.Message):
    __slots__ = ("offset", "data", "size")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    size: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...
