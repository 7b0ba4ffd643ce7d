import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.job.v1 import artifact_pb2 as _artifact_pb2
from starforge_api.job.v1 import job_pb2 as _job_pb2
from starforge_api.job.v1 import job_spec_pb2 as _job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as _job_state_pb2
from starforge_api.job.v1 import telemetry_pb2 as _telemetry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "request_id", "dry_run", "workspace_digest")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    spec: _job_spec_pb2.JobSpec
    request_id: str
    dry_run: bool
    workspace_digest: str
    def __init__(self, spec: _Optional[_Union[_job_spec_pb2.JobSpec, _Mapping]] = ..., request_id: _Optional[str] = ..., dry_run: _Optional[bool] = ..., workspace_digest: _Optional[str] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "warnings")
    JOB_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("project", "owner", "states", "experiment", "page_size", "page_token", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    project: str
    owner: str
    states: _containers.RepeatedScalarFieldContainer[_job_state_pb2.JobState]
    experiment: str
    page_size: int
    page_token: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, project: _Optional[str] = ..., owner: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_job_state_pb2.JobState, str]]] = ..., experiment: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StopJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StopJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class PauseJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class RetryJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class StreamJobLogsRequest(_message.Message):
    __slots__ = ("job_id", "tail_lines", "follow", "attempt_number", "after_attempt_number", "after_offset", "before_attempt_number", "before_offset")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    AFTER_ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    AFTER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BEFORE_ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tail_lines: int
    follow: bool
    attempt_number: int
    after_attempt_number: int
    after_offset: int
    before_attempt_number: int
    before_offset: int
    def __init__(self, job_id: _Optional[str] = ..., tail_lines: _Optional[int] = ..., follow: _Optional[bool] = ..., attempt_number: _Optional[int] = ..., after_attempt_number: _Optional[int] = ..., after_offset: _Optional[int] = ..., before_attempt_number: _Optional[int] = ..., before_offset: _Optional[int] = ...) -> None: ...

class StreamJobLogsResponse(_message.Message):
    __slots__ = ("lines", "final_state")
    LINES_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[_telemetry_pb2.LogLine]
    final_state: _job_state_pb2.JobState
    def __init__(self, lines: _Optional[_Iterable[_Union[_telemetry_pb2.LogLine, _Mapping]]] = ..., final_state: _Optional[_Union[_job_state_pb2.JobState, str]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "after_sequence")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_sequence: int
    def __init__(self, job_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("event", "job")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    event: _job_pb2.JobEvent
    job: _job_pb2.Job
    def __init__(self, event: _Optional[_Union[_job_pb2.JobEvent, _Mapping]] = ..., job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class GetJobMetricsRequest(_message.Message):
    __slots__ = ("job_id", "names", "max_points", "after_step", "up_to_step")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_POINTS_FIELD_NUMBER: _ClassVar[int]
    AFTER_STEP_FIELD_NUMBER: _ClassVar[int]
    UP_TO_STEP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    max_points: int
    after_step: int
    up_to_step: int
    def __init__(self, job_id: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ..., max_points: _Optional[int] = ..., after_step: _Optional[int] = ..., up_to_step: _Optional[int] = ...) -> None: ...

class GetJobMetricsResponse(_message.Message):
    __slots__ = ("series",)
    SERIES_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[_telemetry_pb2.MetricSeries]
    def __init__(self, series: _Optional[_Iterable[_Union[_telemetry_pb2.MetricSeries, _Mapping]]] = ...) -> None: ...

class GetJobSamplesRequest(_message.Message):
    __slots__ = ("job_id", "limit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    limit: int
    def __init__(self, job_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GetJobSamplesResponse(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[_telemetry_pb2.Sample]
    def __init__(self, samples: _Optional[_Iterable[_Union[_telemetry_pb2.Sample, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("version", "user", "admin", "catalog_digest", "time", "runner_digest")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    CATALOG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    RUNNER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    version: str
    user: str
    admin: bool
    catalog_digest: str
    time: _timestamp_pb2.Timestamp
    runner_digest: str
    def __init__(self, version: _Optional[str] = ..., user: _Optional[str] = ..., admin: _Optional[bool] = ..., catalog_digest: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., runner_digest: _Optional[str] = ...) -> None: ...

class ListJobArtifactsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token", "attempt_id")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[_artifact_pb2.Artifact]
    next_page_token: str
    attempt_id: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[_artifact_pb2.Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class DownloadJobArtifactRequest(_message.Message):
    __slots__ = ("job_id", "path", "offset")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    path: str
    offset: int
    def __init__(self, job_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class DownloadJobArtifactResponse(_message.Message):
    __slots__ = ("offset", "data", "size")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    size: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...
