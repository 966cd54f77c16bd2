from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PositionInfo(_message.Message):
    __slots__ = ("ledgerId", "entryId")
    LEDGERID_FIELD_NUMBER: _ClassVar[int]
    ENTRYID_FIELD_NUMBER: _ClassVar[int]
    ledgerId: int
    entryId: int
    def __init__(self, ledgerId: _Optional[int] = ..., entryId: _Optional[int] = ...) -> None: ...

class IndexEntry(_message.Message):
    __slots__ = ("version", "position", "hash")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    version: int
    position: PositionInfo
    hash: bytes
    def __init__(self, version: _Optional[int] = ..., position: _Optional[_Union[PositionInfo, _Mapping]] = ..., hash: _Optional[bytes] = ...) -> None: ...

class SchemaLocator(_message.Message):
    __slots__ = ("info", "index")
    INFO_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    info: IndexEntry
    index: _containers.RepeatedCompositeFieldContainer[IndexEntry]
    def __init__(self, info: _Optional[_Union[IndexEntry, _Mapping]] = ..., index: _Optional[_Iterable[_Union[IndexEntry, _Mapping]]] = ...) -> None: ...
