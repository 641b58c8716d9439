import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ray_otel_events.protobuf import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskLifecycleEvent(_message.Message):
    __slots__ = ("task_id", "task_attempt", "state_transitions", "ray_error_info", "node_id", "worker_id", "worker_pid", "job_id", "is_debugger_paused", "actor_repr_name", "task_log_info")
    class StateTransition(_message.Message):
        __slots__ = ("state", "timestamp")
        STATE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        state: _common_pb2.TaskStatus
        timestamp: _timestamp_pb2.Timestamp
        def __init__(self, state: _Optional[_Union[_common_pb2.TaskStatus, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
    class TaskLogInfo(_message.Message):
        __slots__ = ("stdout_file", "stderr_file", "stdout_start", "stdout_end", "stderr_start", "stderr_end")
        STDOUT_FILE_FIELD_NUMBER: _ClassVar[int]
        STDERR_FILE_FIELD_NUMBER: _ClassVar[int]
        STDOUT_START_FIELD_NUMBER: _ClassVar[int]
        STDOUT_END_FIELD_NUMBER: _ClassVar[int]
        STDERR_START_FIELD_NUMBER: _ClassVar[int]
        STDERR_END_FIELD_NUMBER: _ClassVar[int]
        stdout_file: str
        stderr_file: str
        stdout_start: int
        stdout_end: int
        stderr_start: int
        stderr_end: int
        def __init__(self, stdout_file: _Optional[str] = ..., stderr_file: _Optional[str] = ..., stdout_start: _Optional[int] = ..., stdout_end: _Optional[int] = ..., stderr_start: _Optional[int] = ..., stderr_end: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    RAY_ERROR_INFO_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_PID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    IS_DEBUGGER_PAUSED_FIELD_NUMBER: _ClassVar[int]
    ACTOR_REPR_NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_LOG_INFO_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    task_attempt: int
    state_transitions: _containers.RepeatedCompositeFieldContainer[TaskLifecycleEvent.StateTransition]
    ray_error_info: _common_pb2.RayErrorInfo
    node_id: bytes
    worker_id: bytes
    worker_pid: int
    job_id: bytes
    is_debugger_paused: bool
    actor_repr_name: str
    task_log_info: TaskLifecycleEvent.TaskLogInfo
    def __init__(self, task_id: _Optional[bytes] = ..., task_attempt: _Optional[int] = ..., state_transitions: _Optional[_Iterable[_Union[TaskLifecycleEvent.StateTransition, _Mapping]]] = ..., ray_error_info: _Optional[_Union[_common_pb2.RayErrorInfo, _Mapping]] = ..., node_id: _Optional[bytes] = ..., worker_id: _Optional[bytes] = ..., worker_pid: _Optional[int] = ..., job_id: _Optional[bytes] = ..., is_debugger_paused: _Optional[bool] = ..., actor_repr_name: _Optional[str] = ..., task_log_info: _Optional[_Union[TaskLifecycleEvent.TaskLogInfo, _Mapping]] = ...) -> None: ...
