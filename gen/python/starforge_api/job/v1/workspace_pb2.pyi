from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkspaceManifest(_message.Message):
    __slots__ = ("files", "digest", "total_bytes")
    FILES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[WorkspaceFile]
    digest: str
    total_bytes: int
    def __init__(self, files: _Optional[_Iterable[_Union[WorkspaceFile, _Mapping]]] = ..., digest: _Optional[str] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class WorkspaceFile(_message.Message):
    __slots__ = ("path", "sha256", "size", "executable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    size: int
    executable: bool
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., executable: _Optional[bool] = ...) -> None: ...
