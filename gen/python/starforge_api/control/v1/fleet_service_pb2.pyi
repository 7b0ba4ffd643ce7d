from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FleetState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLEET_STATE_UNSPECIFIED: _ClassVar[FleetState]
    FLEET_STATE_ACTIVE: _ClassVar[FleetState]
    FLEET_STATE_DRAINED: _ClassVar[FleetState]
    FLEET_STATE_CLOSED: _ClassVar[FleetState]
FLEET_STATE_UNSPECIFIED: FleetState
FLEET_STATE_ACTIVE: FleetState
FLEET_STATE_DRAINED: FleetState
FLEET_STATE_CLOSED: FleetState

class HardwareProfile(_message.Message):
    __slots__ = ("series", "gpus_per_node", "gpu_memory_gib", "interconnect", "default_gpus", "max_nodes", "description")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    series: str
    gpus_per_node: int
    gpu_memory_gib: int
    interconnect: str
    default_gpus: int
    max_nodes: int
    description: str
    def __init__(self, series: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., gpu_memory_gib: _Optional[int] = ..., interconnect: _Optional[str] = ..., default_gpus: _Optional[int] = ..., max_nodes: _Optional[int] = ..., description: _Optional[str] = ...) -> None: ...

class SeriesCapacity(_message.Message):
    __slots__ = ("series", "total_gpus", "used_gpus", "nodes")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GPUS_FIELD_NUMBER: _ClassVar[int]
    USED_GPUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    series: str
    total_gpus: int
    used_gpus: int
    nodes: int
    def __init__(self, series: _Optional[str] = ..., total_gpus: _Optional[int] = ..., used_gpus: _Optional[int] = ..., nodes: _Optional[int] = ...) -> None: ...

class Fleet(_message.Message):
    __slots__ = ("name", "kind", "executor_address", "state", "capacity", "capabilities", "window", "running_jobs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    executor_address: str
    state: FleetState
    capacity: _containers.RepeatedCompositeFieldContainer[SeriesCapacity]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    window: str
    running_jobs: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., executor_address: _Optional[str] = ..., state: _Optional[_Union[FleetState, str]] = ..., capacity: _Optional[_Iterable[_Union[SeriesCapacity, _Mapping]]] = ..., capabilities: _Optional[_Iterable[str]] = ..., window: _Optional[str] = ..., running_jobs: _Optional[int] = ...) -> None: ...

class ListProfilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProfilesResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[HardwareProfile]
    def __init__(self, profiles: _Optional[_Iterable[_Union[HardwareProfile, _Mapping]]] = ...) -> None: ...

class ListFleetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFleetsResponse(_message.Message):
    __slots__ = ("fleets", "queue_depth")
    class QueueDepthEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    FLEETS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    fleets: _containers.RepeatedCompositeFieldContainer[Fleet]
    queue_depth: _containers.ScalarMap[str, int]
    def __init__(self, fleets: _Optional[_Iterable[_Union[Fleet, _Mapping]]] = ..., queue_depth: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DrainFleetRequest(_message.Message):
    __slots__ = ("fleet", "reason")
    FLEET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    fleet: str
    reason: str
    def __init__(self, fleet: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainFleetResponse(_message.Message):
    __slots__ = ("fleet", "paused_job_ids")
    FLEET_FIELD_NUMBER: _ClassVar[int]
    PAUSED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    fleet: Fleet
    paused_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, fleet: _Optional[_Union[Fleet, _Mapping]] = ..., paused_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class UndrainFleetRequest(_message.Message):
    __slots__ = ("fleet",)
    FLEET_FIELD_NUMBER: _ClassVar[int]
    fleet: str
    def __init__(self, fleet: _Optional[str] = ...) -> None: ...

class UndrainFleetResponse(_message.Message):
    __slots__ = ("fleet", "requeued_job_ids")
    FLEET_FIELD_NUMBER: _ClassVar[int]
    REQUEUED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    fleet: Fleet
    requeued_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, fleet: _Optional[_Union[Fleet, _Mapping]] = ..., requeued_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...
