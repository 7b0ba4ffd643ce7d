from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FindMissingBlobsRequest(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digests: _Optional[_Iterable[str]] = ...) -> None: ...

class FindMissingBlobsResponse(_message.Message):
    __slots__ = ("missing_digests",)
    MISSING_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    missing_digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, missing_digests: _Optional[_Iterable[str]] = ...) -> None: ...

class UploadBlobsRequest(_message.Message):
    __slots__ = ("digest", "size", "data", "finish", "blobs")
    class WholeBlob(_message.Message):
        __slots__ = ("digest", "data")
        DIGEST_FIELD_NUMBER: _ClassVar[int]
        DATA_FIELD_NUMBER: _ClassVar[int]
        digest: str
        data: bytes
        def __init__(self, digest: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    size: int
    data: bytes
    finish: bool
    blobs: _containers.RepeatedCompositeFieldContainer[UploadBlobsRequest.WholeBlob]
    def __init__(self, digest: _Optional[str] = ..., size: _Optional[int] = ..., data: _Optional[bytes] = ..., finish: _Optional[bool] = ..., blobs: _Optional[_Iterable[_Union[UploadBlobsRequest.WholeBlob, _Mapping]]] = ...) -> None: ...

class UploadBlobsResponse(_message.Message):
    __slots__ = ("blobs_written", "bytes_written", "blobs_already_present")
    BLOBS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BLOBS_ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    blobs_written: int
    bytes_written: int
    blobs_already_present: int
    def __init__(self, blobs_written: _Optional[int] = ..., bytes_written: _Optional[int] = ..., blobs_already_present: _Optional[int] = ...) -> None: ...

class ReadBlobRequest(_message.Message):
    __slots__ = ("digest", "offset")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    digest: str
    offset: int
    def __init__(self, digest: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class ReadBlobResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...
