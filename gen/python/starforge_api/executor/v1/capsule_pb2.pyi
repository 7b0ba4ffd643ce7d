from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CapsuleStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPSULE_STAGE_UNSPECIFIED: _ClassVar[CapsuleStage]
    CAPSULE_STAGE_TRAIN: _ClassVar[CapsuleStage]
    CAPSULE_STAGE_EXPORT: _ClassVar[CapsuleStage]
    CAPSULE_STAGE_EVAL: _ClassVar[CapsuleStage]
CAPSULE_STAGE_UNSPECIFIED: CapsuleStage
CAPSULE_STAGE_TRAIN: CapsuleStage
CAPSULE_STAGE_EXPORT: CapsuleStage
CAPSULE_STAGE_EVAL: CapsuleStage

class CapsuleManifest(_message.Message):
    __slots__ = ("schema", "job_id", "attempt_id", "attempt_number", "runner", "files", "run")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    schema: str
    job_id: str
    attempt_id: str
    attempt_number: int
    runner: str
    files: _containers.RepeatedCompositeFieldContainer[CapsuleFile]
    run: CapsuleRun
    def __init__(self, schema: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., runner: _Optional[str] = ..., files: _Optional[_Iterable[_Union[CapsuleFile, _Mapping]]] = ..., run: _Optional[_Union[CapsuleRun, _Mapping]] = ...) -> None: ...

class CapsuleFile(_message.Message):
    __slots__ = ("root", "path", "sha256", "size", "executable")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    root: str
    path: str
    sha256: str
    size: int
    executable: bool
    def __init__(self, root: _Optional[str] = ..., path: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., executable: _Optional[bool] = ...) -> None: ...

class CapsuleRun(_message.Message):
    __slots__ = ("method", "adapter", "experiment", "entrypoint", "config_json", "observability", "model", "train_data", "validation_data", "pools", "stage", "observability_url", "observability_tool", "runtime_id", "runtime_python", "runtime_capabilities")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    OBSERVABILITY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_DATA_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_DATA_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVABILITY_URL_FIELD_NUMBER: _ClassVar[int]
    OBSERVABILITY_TOOL_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_PYTHON_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    method: str
    adapter: str
    experiment: str
    entrypoint: str
    config_json: str
    observability: str
    model: str
    train_data: str
    validation_data: str
    pools: _containers.RepeatedCompositeFieldContainer[CapsulePool]
    stage: CapsuleStage
    observability_url: str
    observability_tool: str
    runtime_id: str
    runtime_python: str
    runtime_capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, method: _Optional[str] = ..., adapter: _Optional[str] = ..., experiment: _Optional[str] = ..., entrypoint: _Optional[str] = ..., config_json: _Optional[str] = ..., observability: _Optional[str] = ..., model: _Optional[str] = ..., train_data: _Optional[str] = ..., validation_data: _Optional[str] = ..., pools: _Optional[_Iterable[_Union[CapsulePool, _Mapping]]] = ..., stage: _Optional[_Union[CapsuleStage, str]] = ..., observability_url: _Optional[str] = ..., observability_tool: _Optional[str] = ..., runtime_id: _Optional[str] = ..., runtime_python: _Optional[str] = ..., runtime_capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class CapsulePool(_message.Message):
    __slots__ = ("name", "series", "nodes", "gpus_per_node")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    series: str
    nodes: int
    gpus_per_node: int
    def __init__(self, name: _Optional[str] = ..., series: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ...) -> None: ...
