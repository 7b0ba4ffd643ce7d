from starforge_api.job.v1 import job_spec_pb2 as _job_spec_pb2
from starforge_api.job.v1 import workspace_pb2 as _workspace_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LaunchRequest(_message.Message):
    __slots__ = ("attempt_id", "job_id", "attempt_number", "owner", "project", "spec", "pools", "image", "image_digest", "runtime_id", "capsule", "blob_source", "ingest", "env", "secret_env", "labels", "datasets", "resume", "stop_grace_seconds", "out_key")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SecretEnvEntry(_message.Message):
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
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    CAPSULE_FIELD_NUMBER: _ClassVar[int]
    BLOB_SOURCE_FIELD_NUMBER: _ClassVar[int]
    INGEST_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    SECRET_ENV_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    STOP_GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OUT_KEY_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    job_id: str
    attempt_number: int
    owner: str
    project: str
    spec: _job_spec_pb2.JobSpec
    pools: _containers.RepeatedCompositeFieldContainer[_job_spec_pb2.Pool]
    image: str
    image_digest: str
    runtime_id: str
    capsule: Capsule
    blob_source: BlobSource
    ingest: IngestTarget
    env: _containers.ScalarMap[str, str]
    secret_env: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    datasets: _containers.RepeatedCompositeFieldContainer[ResolvedDataset]
    resume: bool
    stop_grace_seconds: int
    out_key: str
    def __init__(self, attempt_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., owner: _Optional[str] = ..., project: _Optional[str] = ..., spec: _Optional[_Union[_job_spec_pb2.JobSpec, _Mapping]] = ..., pools: _Optional[_Iterable[_Union[_job_spec_pb2.Pool, _Mapping]]] = ..., image: _Optional[str] = ..., image_digest: _Optional[str] = ..., runtime_id: _Optional[str] = ..., capsule: _Optional[_Union[Capsule, _Mapping]] = ..., blob_source: _Optional[_Union[BlobSource, _Mapping]] = ..., ingest: _Optional[_Union[IngestTarget, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., datasets: _Optional[_Iterable[_Union[ResolvedDataset, _Mapping]]] = ..., resume: _Optional[bool] = ..., stop_grace_seconds: _Optional[int] = ..., out_key: _Optional[str] = ...) -> None: ...

class Capsule(_message.Message):
    __slots__ = ("files", "capsule_digest", "runner_digest")
    FILES_FIELD_NUMBER: _ClassVar[int]
    CAPSULE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RUNNER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[_workspace_pb2.WorkspaceFile]
    capsule_digest: str
    runner_digest: str
    def __init__(self, files: _Optional[_Iterable[_Union[_workspace_pb2.WorkspaceFile, _Mapping]]] = ..., capsule_digest: _Optional[str] = ..., runner_digest: _Optional[str] = ...) -> None: ...

class BlobSource(_message.Message):
    __slots__ = ("address", "token", "http_url", "ca_pem")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    HTTP_URL_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    address: str
    token: str
    http_url: str
    ca_pem: str
    def __init__(self, address: _Optional[str] = ..., token: _Optional[str] = ..., http_url: _Optional[str] = ..., ca_pem: _Optional[str] = ...) -> None: ...

class IngestTarget(_message.Message):
    __slots__ = ("address", "token", "ca_pem")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    address: str
    token: str
    ca_pem: str
    def __init__(self, address: _Optional[str] = ..., token: _Optional[str] = ..., ca_pem: _Optional[str] = ...) -> None: ...

class ResolvedDataset(_message.Message):
    __slots__ = ("name", "ref", "manifest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    ref: str
    manifest: _workspace_pb2.WorkspaceManifest
    def __init__(self, name: _Optional[str] = ..., ref: _Optional[str] = ..., manifest: _Optional[_Union[_workspace_pb2.WorkspaceManifest, _Mapping]] = ...) -> None: ...
