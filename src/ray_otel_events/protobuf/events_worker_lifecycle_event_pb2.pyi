import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ray_otel_events.protobuf import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerLifecycleEvent(_message.Message):
    __slots__ = ("worker_id", "job_id", "state_transitions")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ALIVE: _ClassVar[WorkerLifecycleEvent.State]
        DEAD: _ClassVar[WorkerLifecycleEvent.State]
    ALIVE: WorkerLifecycleEvent.State
    DEAD: WorkerLifecycleEvent.State
    class DeathInfo(_message.Message):
        __slots__ = ("exit_type", "exit_detail", "memory_used_bytes")
        EXIT_TYPE_FIELD_NUMBER: _ClassVar[int]
        EXIT_DETAIL_FIELD_NUMBER: _ClassVar[int]
        MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
        exit_type: _common_pb2.WorkerExitType
        exit_detail: str
        memory_used_bytes: int
        def __init__(self, exit_type: _Optional[_Union[_common_pb2.WorkerExitType, str]] = ..., exit_detail: _Optional[str] = ..., memory_used_bytes: _Optional[int] = ...) -> None: ...
    class StateTransition(_message.Message):
        __slots__ = ("state", "timestamp", "worker_launch_time_ms", "worker_launched_time_ms", "start_time_ms", "end_time_ms", "death_info")
        STATE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        WORKER_LAUNCH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
        WORKER_LAUNCHED_TIME_MS_FIELD_NUMBER: _ClassVar[int]
        START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
        END_TIME_MS_FIELD_NUMBER: _ClassVar[int]
        DEATH_INFO_FIELD_NUMBER: _ClassVar[int]
        state: WorkerLifecycleEvent.State
        timestamp: _timestamp_pb2.Timestamp
        worker_launch_time_ms: int
        worker_launched_time_ms: int
        start_time_ms: int
        end_time_ms: int
        death_info: WorkerLifecycleEvent.DeathInfo
        def __init__(self, state: _Optional[_Union[WorkerLifecycleEvent.State, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., worker_launch_time_ms: _Optional[int] = ..., worker_launched_time_ms: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., end_time_ms: _Optional[int] = ..., death_info: _Optional[_Union[WorkerLifecycleEvent.DeathInfo, _Mapping]] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    worker_id: bytes
    job_id: bytes
    state_transitions: _containers.RepeatedCompositeFieldContainer[WorkerLifecycleEvent.StateTransition]
    def __init__(self, worker_id: _Optional[bytes] = ..., job_id: _Optional[bytes] = ..., state_transitions: _Optional[_Iterable[_Union[WorkerLifecycleEvent.StateTransition, _Mapping]]] = ...) -> None: ...
