import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ray_otel_events.protobuf import events_actor_definition_event_pb2 as _events_actor_definition_event_pb2
from ray_otel_events.protobuf import events_actor_lifecycle_event_pb2 as _events_actor_lifecycle_event_pb2
from ray_otel_events.protobuf import events_actor_task_definition_event_pb2 as _events_actor_task_definition_event_pb2
from ray_otel_events.protobuf import events_driver_job_definition_event_pb2 as _events_driver_job_definition_event_pb2
from ray_otel_events.protobuf import events_driver_job_lifecycle_event_pb2 as _events_driver_job_lifecycle_event_pb2
from ray_otel_events.protobuf import events_node_definition_event_pb2 as _events_node_definition_event_pb2
from ray_otel_events.protobuf import events_node_lifecycle_event_pb2 as _events_node_lifecycle_event_pb2
from ray_otel_events.protobuf import events_placement_group_definition_event_pb2 as _events_placement_group_definition_event_pb2
from ray_otel_events.protobuf import events_placement_group_lifecycle_event_pb2 as _events_placement_group_lifecycle_event_pb2
from ray_otel_events.protobuf import events_submission_job_definition_event_pb2 as _events_submission_job_definition_event_pb2
from ray_otel_events.protobuf import events_submission_job_lifecycle_event_pb2 as _events_submission_job_lifecycle_event_pb2
from ray_otel_events.protobuf import events_task_definition_event_pb2 as _events_task_definition_event_pb2
from ray_otel_events.protobuf import events_task_lifecycle_event_pb2 as _events_task_lifecycle_event_pb2
from ray_otel_events.protobuf import events_task_profile_events_pb2 as _events_task_profile_events_pb2
from ray_otel_events.protobuf import events_worker_definition_event_pb2 as _events_worker_definition_event_pb2
from ray_otel_events.protobuf import events_worker_lifecycle_event_pb2 as _events_worker_lifecycle_event_pb2
from ray_otel_events.protobuf import platform_event_pb2 as _platform_event_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RayEvent(_message.Message):
    __slots__ = ("event_id", "source_type", "event_type", "timestamp", "severity", "message", "session_name", "task_definition_event", "task_lifecycle_event", "actor_task_definition_event", "task_profile_events", "driver_job_definition_event", "driver_job_lifecycle_event", "node_definition_event", "node_lifecycle_event", "actor_definition_event", "actor_lifecycle_event", "node_id", "placement_group_definition_event", "placement_group_lifecycle_event", "submission_job_definition_event", "submission_job_lifecycle_event", "platform_event", "worker_lifecycle_event", "worker_definition_event")
    class SourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SOURCE_TYPE_UNSPECIFIED: _ClassVar[RayEvent.SourceType]
        CORE_WORKER: _ClassVar[RayEvent.SourceType]
        GCS: _ClassVar[RayEvent.SourceType]
        RAYLET: _ClassVar[RayEvent.SourceType]
        CLUSTER_LIFECYCLE: _ClassVar[RayEvent.SourceType]
        AUTOSCALER: _ClassVar[RayEvent.SourceType]
        JOBS: _ClassVar[RayEvent.SourceType]
    SOURCE_TYPE_UNSPECIFIED: RayEvent.SourceType
    CORE_WORKER: RayEvent.SourceType
    GCS: RayEvent.SourceType
    RAYLET: RayEvent.SourceType
    CLUSTER_LIFECYCLE: RayEvent.SourceType
    AUTOSCALER: RayEvent.SourceType
    JOBS: RayEvent.SourceType
    class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        EVENT_TYPE_UNSPECIFIED: _ClassVar[RayEvent.EventType]
        TASK_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        TASK_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        ACTOR_TASK_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        TASK_PROFILE_EVENT: _ClassVar[RayEvent.EventType]
        DRIVER_JOB_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        DRIVER_JOB_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        NODE_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        NODE_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        ACTOR_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        ACTOR_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        PLACEMENT_GROUP_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        PLACEMENT_GROUP_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        SUBMISSION_JOB_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
        SUBMISSION_JOB_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        PLATFORM_EVENT: _ClassVar[RayEvent.EventType]
        WORKER_LIFECYCLE_EVENT: _ClassVar[RayEvent.EventType]
        WORKER_DEFINITION_EVENT: _ClassVar[RayEvent.EventType]
    EVENT_TYPE_UNSPECIFIED: RayEvent.EventType
    TASK_DEFINITION_EVENT: RayEvent.EventType
    TASK_LIFECYCLE_EVENT: RayEvent.EventType
    ACTOR_TASK_DEFINITION_EVENT: RayEvent.EventType
    TASK_PROFILE_EVENT: RayEvent.EventType
    DRIVER_JOB_DEFINITION_EVENT: RayEvent.EventType
    DRIVER_JOB_LIFECYCLE_EVENT: RayEvent.EventType
    NODE_DEFINITION_EVENT: RayEvent.EventType
    NODE_LIFECYCLE_EVENT: RayEvent.EventType
    ACTOR_DEFINITION_EVENT: RayEvent.EventType
    ACTOR_LIFECYCLE_EVENT: RayEvent.EventType
    PLACEMENT_GROUP_DEFINITION_EVENT: RayEvent.EventType
    PLACEMENT_GROUP_LIFECYCLE_EVENT: RayEvent.EventType
    SUBMISSION_JOB_DEFINITION_EVENT: RayEvent.EventType
    SUBMISSION_JOB_LIFECYCLE_EVENT: RayEvent.EventType
    PLATFORM_EVENT: RayEvent.EventType
    WORKER_LIFECYCLE_EVENT: RayEvent.EventType
    WORKER_DEFINITION_EVENT: RayEvent.EventType
    class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        EVENT_SEVERITY_UNSPECIFIED: _ClassVar[RayEvent.Severity]
        TRACE: _ClassVar[RayEvent.Severity]
        DEBUG: _ClassVar[RayEvent.Severity]
        INFO: _ClassVar[RayEvent.Severity]
        WARNING: _ClassVar[RayEvent.Severity]
        ERROR: _ClassVar[RayEvent.Severity]
        FATAL: _ClassVar[RayEvent.Severity]
    EVENT_SEVERITY_UNSPECIFIED: RayEvent.Severity
    TRACE: RayEvent.Severity
    DEBUG: RayEvent.Severity
    INFO: RayEvent.Severity
    WARNING: RayEvent.Severity
    ERROR: RayEvent.Severity
    FATAL: RayEvent.Severity
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_NAME_FIELD_NUMBER: _ClassVar[int]
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
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_JOB_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_JOB_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_EVENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_LIFECYCLE_EVENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_DEFINITION_EVENT_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    source_type: RayEvent.SourceType
    event_type: RayEvent.EventType
    timestamp: _timestamp_pb2.Timestamp
    severity: RayEvent.Severity
    message: str
    session_name: str
    task_definition_event: _events_task_definition_event_pb2.TaskDefinitionEvent
    task_lifecycle_event: _events_task_lifecycle_event_pb2.TaskLifecycleEvent
    actor_task_definition_event: _events_actor_task_definition_event_pb2.ActorTaskDefinitionEvent
    task_profile_events: _events_task_profile_events_pb2.TaskProfileEvents
    driver_job_definition_event: _events_driver_job_definition_event_pb2.DriverJobDefinitionEvent
    driver_job_lifecycle_event: _events_driver_job_lifecycle_event_pb2.DriverJobLifecycleEvent
    node_definition_event: _events_node_definition_event_pb2.NodeDefinitionEvent
    node_lifecycle_event: _events_node_lifecycle_event_pb2.NodeLifecycleEvent
    actor_definition_event: _events_actor_definition_event_pb2.ActorDefinitionEvent
    actor_lifecycle_event: _events_actor_lifecycle_event_pb2.ActorLifecycleEvent
    node_id: bytes
    placement_group_definition_event: _events_placement_group_definition_event_pb2.PlacementGroupDefinitionEvent
    placement_group_lifecycle_event: _events_placement_group_lifecycle_event_pb2.PlacementGroupLifecycleEvent
    submission_job_definition_event: _events_submission_job_definition_event_pb2.SubmissionJobDefinitionEvent
    submission_job_lifecycle_event: _events_submission_job_lifecycle_event_pb2.SubmissionJobLifecycleEvent
    platform_event: _platform_event_pb2.PlatformEvent
    worker_lifecycle_event: _events_worker_lifecycle_event_pb2.WorkerLifecycleEvent
    worker_definition_event: _events_worker_definition_event_pb2.WorkerDefinitionEvent
    def __init__(self, event_id: _Optional[bytes] = ..., source_type: _Optional[_Union[RayEvent.SourceType, str]] = ..., event_type: _Optional[_Union[RayEvent.EventType, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., severity: _Optional[_Union[RayEvent.Severity, str]] = ..., message: _Optional[str] = ..., session_name: _Optional[str] = ..., task_definition_event: _Optional[_Union[_events_task_definition_event_pb2.TaskDefinitionEvent, _Mapping]] = ..., task_lifecycle_event: _Optional[_Union[_events_task_lifecycle_event_pb2.TaskLifecycleEvent, _Mapping]] = ..., actor_task_definition_event: _Optional[_Union[_events_actor_task_definition_event_pb2.ActorTaskDefinitionEvent, _Mapping]] = ..., task_profile_events: _Optional[_Union[_events_task_profile_events_pb2.TaskProfileEvents, _Mapping]] = ..., driver_job_definition_event: _Optional[_Union[_events_driver_job_definition_event_pb2.DriverJobDefinitionEvent, _Mapping]] = ..., driver_job_lifecycle_event: _Optional[_Union[_events_driver_job_lifecycle_event_pb2.DriverJobLifecycleEvent, _Mapping]] = ..., node_definition_event: _Optional[_Union[_events_node_definition_event_pb2.NodeDefinitionEvent, _Mapping]] = ..., node_lifecycle_event: _Optional[_Union[_events_node_lifecycle_event_pb2.NodeLifecycleEvent, _Mapping]] = ..., actor_definition_event: _Optional[_Union[_events_actor_definition_event_pb2.ActorDefinitionEvent, _Mapping]] = ..., actor_lifecycle_event: _Optional[_Union[_events_actor_lifecycle_event_pb2.ActorLifecycleEvent, _Mapping]] = ..., node_id: _Optional[bytes] = ..., placement_group_definition_event: _Optional[_Union[_events_placement_group_definition_event_pb2.PlacementGroupDefinitionEvent, _Mapping]] = ..., placement_group_lifecycle_event: _Optional[_Union[_events_placement_group_lifecycle_event_pb2.PlacementGroupLifecycleEvent, _Mapping]] = ..., submission_job_definition_event: _Optional[_Union[_events_submission_job_definition_event_pb2.SubmissionJobDefinitionEvent, _Mapping]] = ..., submission_job_lifecycle_event: _Optional[_Union[_events_submission_job_lifecycle_event_pb2.SubmissionJobLifecycleEvent, _Mapping]] = ..., platform_event: _Optional[_Union[_platform_event_pb2.PlatformEvent, _Mapping]] = ..., worker_lifecycle_event: _Optional[_Union[_events_worker_lifecycle_event_pb2.WorkerLifecycleEvent, _Mapping]] = ..., worker_definition_event: _Optional[_Union[_events_worker_definition_event_pb2.WorkerDefinitionEvent, _Mapping]] = ...) -> None: ...
