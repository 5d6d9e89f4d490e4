from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskStart(_message.Message):
    __slots__ = ("container_id", "pid")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    pid: int
    def __init__(self, container_id: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class TaskExit(_message.Message):
    __slots__ = ("container_id", "id", "pid", "exit_status", "exited_at")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXITED_AT_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    id: str
    pid: int
    exit_status: int
    exited_at: Timestamp
    def __init__(self, container_id: _Optional[str] = ..., id: _Optional[str] = ..., pid: _Optional[int] = ..., exit_status: _Optional[int] = ..., exited_at: _Optional[_Union[Timestamp, _Mapping]] = ...) -> None: ...

class TaskOOM(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class Timestamp(_message.Message):
    __slots__ = ("seconds", "nanos")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    NANOS_FIELD_NUMBER: _ClassVar[int]
    seconds: int
    nanos: int
    def __init__(self, seconds: _Optional[int] = ..., nanos: _Optional[int] = ...) -> None: ...
