import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.job.v1 import lifecycle_event_pb2 as _lifecycle_event_pb2
from starforge_api.job.v1 import telemetry_pb2 as _telemetry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControlSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROL_SIGNAL_UNSPECIFIED: _ClassVar[ControlSignal]
    CONTROL_SIGNAL_STOP: _ClassVar[ControlSignal]
    CONTROL_SIGNAL_PAUSE: _ClassVar[ControlSignal]
CONTROL_SIGNAL_UNSPECIFIED: ControlSignal
CONTROL_SIGNAL_STOP: ControlSignal
CONTROL_SIGNAL_PAUSE: ControlSignal

class Record(_message.Message):
    __slots__ = ("seq", "time", "lifecycle", "log_chunk", "metrics", "samples")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    LOG_CHUNK_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    lifecycle: _lifecycle_event_pb2.LifecycleEvent
    log_chunk: LogChunk
    metrics: MetricBatch
    samples: SampleBatch
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lifecycle: _Optional[_Union[_lifecycle_event_pb2.LifecycleEvent, _Mapping]] = ..., log_chunk: _Optional[_Union[LogChunk, _Mapping]] = ..., metrics: _Optional[_Union[MetricBatch, _Mapping]] = ..., samples: _Optional[_Union[SampleBatch, _Mapping]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("stream", "lines")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    stream: _telemetry_pb2.LogStream
    lines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[_Union[_telemetry_pb2.LogStream, str]] = ..., lines: _Optional[_Iterable[str]] = ...) -> None: ...

class MetricBatch(_message.Message):
    __slots__ = ("points", "columns")
    POINTS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[_telemetry_pb2.MetricPoint]
    columns: _containers.RepeatedCompositeFieldContainer[MetricColumns]
    def __init__(self, points: _Optional[_Iterable[_Union[_telemetry_pb2.MetricPoint, _Mapping]]] = ..., columns: _Optional[_Iterable[_Union[MetricColumns, _Mapping]]] = ...) -> None: ...

class MetricColumns(_message.Message):
    __slots__ = ("name", "steps", "values", "times")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    TIMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    steps: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    times: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., steps: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[float]] = ..., times: _Optional[_Iterable[float]] = ...) -> None: ...

class SampleBatch(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[_telemetry_pb2.Sample]
    def __init__(self, samples: _Optional[_Iterable[_Union[_telemetry_pb2.Sample, _Mapping]]] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("attempt_id", "records")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, attempt_id: _Optional[str] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("acked_seq", "signal")
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    acked_seq: int
    signal: ControlSignal
    def __init__(self, acked_seq: _Optional[int] = ..., signal: _Optional[_Union[ControlSignal, str]] = ...) -> None: ...

class GetCursorRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class GetCursorResponse(_message.Message):
    __slots__ = ("acked_seq",)
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    acked_seq: int
    def __init__(self, acked_seq: _Optional[int] = ...) -> None: ...
