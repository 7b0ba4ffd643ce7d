import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from starforge_api.forgelet.v1 import node_pb2 as _node_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _node_pb2.Node
    def __init__(self, node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ...) -> None: ...

class RegisterNodeResponse(_message.Message):
    __slots__ = ("heartbeat_interval_seconds", "node", "node_token")
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    NODE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_seconds: int
    node: _node_pb2.Node
    node_token: str
    def __init__(self, heartbeat_interval_seconds: _Optional[int] = ..., node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ..., node_token: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("name", "running_attempt_ids", "used_gpu_indices")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    USED_GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    name: str
    running_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    used_gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., running_attempt_ids: _Optional[_Iterable[str]] = ..., used_gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _node_pb2.NodeState
    def __init__(self, state: _Optional[_Union[_node_pb2.NodeState, str]] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("fleet",)
    FLEET_FIELD_NUMBER: _ClassVar[int]
    fleet: str
    def __init__(self, fleet: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_node_pb2.Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_node_pb2.Node, _Mapping]]] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _node_pb2.Node
    def __init__(self, node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ...) -> None: ...

class UndrainNodeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UndrainNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _node_pb2.Node
    def __init__(self, node: _Optional[_Union[_node_pb2.Node, _Mapping]] = ...) -> None: ...

class CreateJoinTokenRequest(_message.Message):
    __slots__ = ("node", "fleet", "ttl_seconds")
    NODE_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    node: str
    fleet: str
    ttl_seconds: int
    def __init__(self, node: _Optional[str] = ..., fleet: _Optional[str] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class CreateJoinTokenResponse(_message.Message):
    __slots__ = ("token", "expire_time")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    token: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, token: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateExecutorTokenRequest(_message.Message):
    __slots__ = ("fleet", "name")
    FLEET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    fleet: str
    name: str
    def __init__(self, fleet: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CreateExecutorTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...
