from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RawEventsData(_message.Message):
    __slots__ = ("events", "task_events_metadata")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TASK_EVENTS_METADATA_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedScalarFieldContainer[bytes]
    task_events_metadata: bytes
    def __init__(self, events: _Optional[_Iterable[bytes]] = ..., task_events_metadata: _Optional[bytes] = ...) -> None: ...

class RawAddEventsRequest(_message.Message):
    __slots__ = ("events_data",)
    EVENTS_DATA_FIELD_NUMBER: _ClassVar[int]
    events_data: RawEventsData
    def __init__(self, events_data: _Optional[_Union[RawEventsData, _Mapping]] = ...) -> None: ...

class EventTypeView(_message.Message):
    __slots__ = ("event_id", "event_type")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    event_type: int
    def __init__(self, event_id: _Optional[bytes] = ..., event_type: _Optional[int] = ...) -> None: ...

class TypesEventsData(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[EventTypeView]
    def __init__(self, events: _Optional[_Iterable[_Union[EventTypeView, _Mapping]]] = ...) -> None: ...

class TypesAddEventsRequest(_message.Message):
    __slots__ = ("events_data",)
    EVENTS_DATA_FIELD_NUMBER: _ClassVar[int]
    events_data: TypesEventsData
    def __init__(self, events_data: _Optional[_Union[TypesEventsData, _Mapping]] = ...) -> None: ...
