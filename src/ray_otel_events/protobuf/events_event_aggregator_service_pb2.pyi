from ray_otel_events.protobuf import common_pb2 as _common_pb2
from ray_otel_events.protobuf import events_base_event_pb2 as _events_base_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddEventsRequest(_message.Message):
    __slots__ = ("events_data",)
    EVENTS_DATA_FIELD_NUMBER: _ClassVar[int]
    events_data: RayEventsData
    def __init__(self, events_data: _Optional[_Union[RayEventsData, _Mapping]] = ...) -> None: ...

class RayEventsData(_message.Message):
    __slots__ = ("events", "task_events_metadata")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TASK_EVENTS_METADATA_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_base_event_pb2.RayEvent]
    task_events_metadata: TaskEventsMetadata
    def __init__(self, events: _Optional[_Iterable[_Union[_events_base_event_pb2.RayEvent, _Mapping]]] = ..., task_events_metadata: _Optional[_Union[TaskEventsMetadata, _Mapping]] = ...) -> None: ...

class TaskEventsMetadata(_message.Message):
    __slots__ = ("dropped_task_attempts",)
    DROPPED_TASK_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    dropped_task_attempts: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskAttempt]
    def __init__(self, dropped_task_attempts: _Optional[_Iterable[_Union[_common_pb2.TaskAttempt, _Mapping]]] = ...) -> None: ...

class AddEventsReply(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: AddEventsStatus
    def __init__(self, status: _Optional[_Union[AddEventsStatus, _Mapping]] = ...) -> None: ...

class AddEventsStatus(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
