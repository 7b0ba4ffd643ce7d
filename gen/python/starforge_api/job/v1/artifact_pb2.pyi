import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArtifactKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARTIFACT_KIND_UNSPECIFIED: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_FILE: _ClassVar[ArtifactKind]
    ARTIFACT_KIND_SYMLINK: _ClassVar[ArtifactKind]
ARTIFACT_KIND_UNSPECIFIED: ArtifactKind
ARTIFACT_KIND_FILE: ArtifactKind
ARTIFACT_KIND_SYMLINK: ArtifactKind

class Artifact(_message.Message):
    __slots__ = ("path", "size", "sha256", "kind", "modify_time", "link_target")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODIFY_TIME_FIELD_NUMBER: _ClassVar[int]
    LINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    sha256: str
    kind: ArtifactKind
    modify_time: _timestamp_pb2.Timestamp
    link_target: str
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., kind: _Optional[_Union[ArtifactKind, str]] = ..., modify_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., link_target: _Optional[str] = ...) -> None: ...
