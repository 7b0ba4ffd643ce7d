import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]
    LOG_STREAM_SYSTEM: _ClassVar[LogStream]
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream
LOG_STREAM_SYSTEM: LogStream

class LogLine(_message.Message):
    __slots__ = ("attempt_number", "offset", "stream", "time", "text")
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    attempt_number: int
    offset: int
    stream: LogStream
    time: _timestamp_pb2.Timestamp
    text: str
    def __init__(self, attempt_number: _Optional[int] = ..., offset: _Optional[int] = ..., stream: _Optional[_Union[LogStream, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("step", "name", "value", "time")
    STEP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    step: int
    name: str
    value: float
    time: _timestamp_pb2.Timestamp
    def __init__(self, step: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[float] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MetricSeries(_message.Message):
    __slots__ = ("name", "points")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    points: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    def __init__(self, name: _Optional[str] = ..., points: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("step", "prompt", "completion", "reward", "extra")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    step: int
    prompt: str
    completion: str
    reward: float
    extra: _containers.ScalarMap[str, str]
    def __init__(self, step: _Optional[int] = ..., prompt: _Optional[str] = ..., completion: _Optional[str] = ..., reward: _Optional[float] = ..., extra: _Optional[_Mapping[str, str]] = ...) -> None: ...
