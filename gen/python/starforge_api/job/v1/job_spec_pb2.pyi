from starforge_api.job.v1 import workspace_pb2 as _workspace_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ObservabilityMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBSERVABILITY_MODE_UNSPECIFIED: _ClassVar[ObservabilityMode]
    OBSERVABILITY_MODE_PLATFORM: _ClassVar[ObservabilityMode]
    OBSERVABILITY_MODE_EXTERNAL: _ClassVar[ObservabilityMode]
OBSERVABILITY_MODE_UNSPECIFIED: ObservabilityMode
OBSERVABILITY_MODE_PLATFORM: ObservabilityMode
OBSERVABILITY_MODE_EXTERNAL: ObservabilityMode

class JobSpec(_message.Message):
    __slots__ = ("api_version", "project", "experiment", "method", "recipe_lock", "pools", "config_json", "overrides", "model", "train_data", "validation_data", "image", "workspace", "provenance", "observability", "then_stages", "retry_budget", "priority", "queue", "fleet", "env", "labels", "framework_version", "datasets", "secrets")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    RECIPE_LOCK_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_DATA_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_DATA_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVABILITY_FIELD_NUMBER: _ClassVar[int]
    THEN_STAGES_FIELD_NUMBER: _ClassVar[int]
    RETRY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    project: str
    experiment: str
    method: str
    recipe_lock: RecipeLock
    pools: _containers.RepeatedCompositeFieldContainer[PoolRequest]
    config_json: str
    overrides: _containers.RepeatedCompositeFieldContainer[Override]
    model: str
    train_data: DataRef
    validation_data: DataRef
    image: str
    workspace: _workspace_pb2.WorkspaceManifest
    provenance: Provenance
    observability: Observability
    then_stages: _containers.RepeatedScalarFieldContainer[str]
    retry_budget: int
    priority: int
    queue: str
    fleet: str
    env: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    framework_version: str
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetMount]
    secrets: _containers.RepeatedCompositeFieldContainer[SecretRef]
    def __init__(self, api_version: _Optional[str] = ..., project: _Optional[str] = ..., experiment: _Optional[str] = ..., method: _Optional[str] = ..., recipe_lock: _Optional[_Union[RecipeLock, _Mapping]] = ..., pools: _Optional[_Iterable[_Union[PoolRequest, _Mapping]]] = ..., config_json: _Optional[str] = ..., overrides: _Optional[_Iterable[_Union[Override, _Mapping]]] = ..., model: _Optional[str] = ..., train_data: _Optional[_Union[DataRef, _Mapping]] = ..., validation_data: _Optional[_Union[DataRef, _Mapping]] = ..., image: _Optional[str] = ..., workspace: _Optional[_Union[_workspace_pb2.WorkspaceManifest, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., observability: _Optional[_Union[Observability, _Mapping]] = ..., then_stages: _Optional[_Iterable[str]] = ..., retry_budget: _Optional[int] = ..., priority: _Optional[int] = ..., queue: _Optional[str] = ..., fleet: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., framework_version: _Optional[str] = ..., datasets: _Optional[_Iterable[_Union[DatasetMount, _Mapping]]] = ..., secrets: _Optional[_Iterable[_Union[SecretRef, _Mapping]]] = ...) -> None: ...

class SecretRef(_message.Message):
    __slots__ = ("name", "env")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    name: str
    env: str
    def __init__(self, name: _Optional[str] = ..., env: _Optional[str] = ...) -> None: ...

class RecipeLock(_message.Message):
    __slots__ = ("method", "version", "digest", "framework_version", "runtime_id")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    method: str
    version: str
    digest: str
    framework_version: str
    runtime_id: str
    def __init__(self, method: _Optional[str] = ..., version: _Optional[str] = ..., digest: _Optional[str] = ..., framework_version: _Optional[str] = ..., runtime_id: _Optional[str] = ...) -> None: ...

class PoolRequest(_message.Message):
    __slots__ = ("name", "profile")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    name: str
    profile: str
    def __init__(self, name: _Optional[str] = ..., profile: _Optional[str] = ...) -> None: ...

class Pool(_message.Message):
    __slots__ = ("name", "series", "nodes", "gpus_per_node", "profile")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    name: str
    series: str
    nodes: int
    gpus_per_node: int
    profile: str
    def __init__(self, name: _Optional[str] = ..., series: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., profile: _Optional[str] = ...) -> None: ...

class Override(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class DataRef(_message.Message):
    __slots__ = ("path", "dataset")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    path: str
    dataset: str
    def __init__(self, path: _Optional[str] = ..., dataset: _Optional[str] = ...) -> None: ...

class DatasetMount(_message.Message):
    __slots__ = ("name", "ref")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    name: str
    ref: str
    def __init__(self, name: _Optional[str] = ..., ref: _Optional[str] = ...) -> None: ...

class Observability(_message.Message):
    __slots__ = ("mode", "url", "tool")
    MODE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    mode: ObservabilityMode
    url: str
    tool: str
    def __init__(self, mode: _Optional[_Union[ObservabilityMode, str]] = ..., url: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("git_commit", "git_branch", "git_dirty", "untracked_files", "config_snapshot", "recipe_digest", "runner_digest", "capsule_digest", "image_digest", "client_version", "client_host")
    GIT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    GIT_BRANCH_FIELD_NUMBER: _ClassVar[int]
    GIT_DIRTY_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_FILES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    RECIPE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RUNNER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CAPSULE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    git_commit: str
    git_branch: str
    git_dirty: bool
    untracked_files: _containers.RepeatedScalarFieldContainer[str]
    config_snapshot: str
    recipe_digest: str
    runner_digest: str
    capsule_digest: str
    image_digest: str
    client_version: str
    client_host: str
    def __init__(self, git_commit: _Optional[str] = ..., git_branch: _Optional[str] = ..., git_dirty: _Optional[bool] = ..., untracked_files: _Optional[_Iterable[str]] = ..., config_snapshot: _Optional[str] = ..., recipe_digest: _Optional[str] = ..., runner_digest: _Optional[str] = ..., capsule_digest: _Optional[str] = ..., image_digest: _Optional[str] = ..., client_version: _Optional[str] = ..., client_host: _Optional[str] = ...) -> None: ...
