import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_READY: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_DRAINED: _ClassVar[NodeState]
    NODE_STATE_LOST: _ClassVar[NodeState]
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_READY: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_DRAINED: NodeState
NODE_STATE_LOST: NodeState

class Gpu(_message.Message):
    __slots__ = ("index", "uuid", "name", "memory_mib", "series")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    memory_mib: int
    series: str
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., memory_mib: _Optional[int] = ..., series: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "address", "gpus", "inventory_source", "state", "running_attempt_ids", "used_gpu_indices", "last_heartbeat_time", "version", "fleet")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    USED_GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    inventory_source: str
    state: NodeState
    running_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    used_gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    last_heartbeat_time: _timestamp_pb2.Timestamp
    version: str
    fleet: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., inventory_source: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., running_attempt_ids: _Optional[_Iterable[str]] = ..., used_gpu_indices: _Optional[_Iterable[int]] = ..., last_heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ..., fleet: _Optional[str] = ...) -> None: ...
