from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PodSandboxKey(_message.Message):
    __slots__ = ("id", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: int
    def __init__(self, id: _Optional[str] = ..., state: _Optional[int] = ...) -> None: ...

class ListPodSandboxKeys(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[PodSandboxKey]
    def __init__(self, items: _Optional[_Iterable[_Union[PodSandboxKey, _Mapping]]] = ...) -> None: ...

class ContainerKey(_message.Message):
    __slots__ = ("id", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: int
    def __init__(self, id: _Optional[str] = ..., state: _Optional[int] = ...) -> None: ...

class ListContainersKeys(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ContainerKey]
    def __init__(self, items: _Optional[_Iterable[_Union[ContainerKey, _Mapping]]] = ...) -> None: ...
