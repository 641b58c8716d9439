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
    __slots__ = ("event_id", "event_type", "task_definition_event", "task_lifecycle_event", "actor_task_definition_event", "task_profile_events", "driver_job_definition_event", "driver_job_lifecycle_event", "node_definition_event", "node_lifecycle_event", "actor_definition_event", "actor_lifecycle_event", "placement_group_definition_event", "placement_group_lifecycle_event", "submission_job_definition_event", "submission_job_lifecycle_event", "platform_event", "worker_lifecycle_event", "worker_definition_event")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    TASK_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TASK_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    TASK_PROFILE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_JOB_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    DRIVER_JOB_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    NODE_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    NODE_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_JOB_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_JOB_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_EVENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    event_type: int
    task_definition_event: bytes
    task_lifecycle_event: bytes
    actor_task_definition_event: bytes
    task_profile_events: bytes
    driver_job_definition_event: bytes
    driver_job_lifecycle_event: bytes
    node_definition_event: bytes
    node_lifecycle_event: bytes
    actor_definition_event: bytes
    actor_lifecycle_event: bytes
    placement_group_definition_event: bytes
    placement_group_lifecycle_event: bytes
    submission_job_definition_event: bytes
    submission_job_lifecycle_event: bytes
    platform_event: bytes
    worker_lifecycle_event: bytes
    worker_definition_event: bytes
    def __init__(self, event_id: _Optional[bytes] = ..., event_type: _Optional[int] = ..., task_definition_event: _Optional[bytes] = ..., task_lifecycle_event: _Optional[bytes] = ..., actor_task_definition_event: _Optional[bytes] = ..., task_profile_events: _Optional[bytes] = ..., driver_job_definition_event: _Optional[bytes] = ..., driver_job_lifecycle_event: _Optional[bytes] = ..., node_definition_event: _Optional[bytes] = ..., node_lifecycle_event: _Optional[bytes] = ..., actor_definition_event: _Optional[bytes] = ..., actor_lifecycle_event: _Optional[bytes] = ..., placement_group_definition_event: _Optional[bytes] = ..., placement_group_lifecycle_event: _Optional[bytes] = ..., submission_job_definition_event: _Optional[bytes] = ..., submission_job_lifecycle_event: _Optional[bytes] = ..., platform_event: _Optional[bytes] = ..., worker_lifecycle_event: _Optional[bytes] = ..., worker_definition_event: _Optional[bytes] = ...) -> None: ...

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
