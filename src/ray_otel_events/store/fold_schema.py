"""The names the store's task folds read and write, in one table.

The Python folds (state_merge) read Ray's JSON keys, write a task row's fields and group its states
by these names, and the compiled folds (native/_state_fold.c, native/_post_fold.c) are given the
same table when state_merge binds them at import (`bind_names`, which reads each attribute the C
uses by name and fails the import if one is missing): no key, field or state name is typed in C.
Ray's JSON keys are the `json_name` of their protobuf fields, and its task types, languages and
states the names of its enums' values, from the descriptors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ray_otel_events.protobuf import common_pb2
from ray_otel_events.protobuf.events_actor_task_definition_event_pb2 import ActorTaskDefinitionEvent
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_task_definition_event_pb2 import TaskDefinitionEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent


@dataclasses.dataclass(frozen=True, slots=True)  # slots: an attribute read is a fast one
class RayKeys:
    """Ray's JSON keys the task folds read, each named by its protobuf field."""

    event_id: str
    event_type: str
    session_name: str
    # TaskDefinitionEvent and ActorTaskDefinitionEvent
    task_name: str
    task_type: str
    task_func: str
    actor_task_name: str
    actor_func: str
    language: str
    required_resources: str
    serialized_runtime_env: str
    placement_group_id: str
    parent_task_id: str
    job_id: str
    actor_id: str
    call_site: str
    label_selector: str
    python_function_descriptor: str  # FunctionDescriptor's
    class_name: str  # PythonFunctionDescriptor's
    function_name: str
    # TaskLifecycleEvent
    state_transitions: str
    state: str  # a StateTransition's
    timestamp: str
    node_id: str
    worker_id: str
    worker_pid: str
    ray_error_info: str
    error_type: str  # RayErrorInfo's
    error_message: str
    task_log_info: str
    stdout_file: str  # TaskLogInfo's
    stderr_file: str
    stdout_start: str
    stdout_end: str
    stderr_start: str
    stderr_end: str


# Where each key's field is; a key read from several messages must be the same in each.
_KEY_MESSAGES: dict[str, tuple[Any, ...]] = {
    "event_id": (RayEvent,),
    "event_type": (RayEvent,),
    "session_name": (RayEvent,),
    "task_name": (TaskDefinitionEvent,),
    "task_type": (TaskDefinitionEvent,),
    "task_func": (TaskDefinitionEvent,),
    "actor_task_name": (ActorTaskDefinitionEvent,),
    "actor_func": (ActorTaskDefinitionEvent,),
    "language": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "required_resources": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "serialized_runtime_env": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "placement_group_id": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "parent_task_id": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "job_id": (TaskDefinitionEvent, ActorTaskDefinitionEvent, TaskLifecycleEvent),
    "actor_id": (ActorTaskDefinitionEvent,),
    "call_site": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "label_selector": (TaskDefinitionEvent, ActorTaskDefinitionEvent),
    "python_function_descriptor": (common_pb2.FunctionDescriptor,),
    "class_name": (common_pb2.PythonFunctionDescriptor,),
    "function_name": (common_pb2.PythonFunctionDescriptor,),
    "state_transitions": (TaskLifecycleEvent,),
    "state": (TaskLifecycleEvent.StateTransition,),
    "timestamp": (TaskLifecycleEvent.StateTransition,),
    "node_id": (TaskLifecycleEvent,),
    "worker_id": (TaskLifecycleEvent,),
    "worker_pid": (TaskLifecycleEvent,),
    "ray_error_info": (TaskLifecycleEvent,),
    "error_type": (common_pb2.RayErrorInfo,),
    "error_message": (common_pb2.RayErrorInfo,),
    "task_log_info": (TaskLifecycleEvent,),
    "stdout_file": (TaskLifecycleEvent.TaskLogInfo,),
    "stderr_file": (TaskLifecycleEvent.TaskLogInfo,),
    "stdout_start": (TaskLifecycleEvent.TaskLogInfo,),
    "stdout_end": (TaskLifecycleEvent.TaskLogInfo,),
    "stderr_start": (TaskLifecycleEvent.TaskLogInfo,),
    "stderr_end": (TaskLifecycleEvent.TaskLogInfo,),
}


def _json_name(field: str) -> str:
    names: set[str] = {message.DESCRIPTOR.fields_by_name[field].json_name for message in _KEY_MESSAGES[field]}
    if len(names) != 1:
        raise RuntimeError(f"{field} has the JSON names {sorted(names)}: the folds read one")
    return names.pop()


RAY_KEYS = RayKeys(*(_json_name(field.name) for field in dataclasses.fields(RayKeys)))


@dataclasses.dataclass(frozen=True, slots=True)  # slots: an attribute read is a fast one
class TaskRow:
    """The fields of a task row the folds write (`ray.util.state`'s TaskState names), each named by
    itself, and those of the objects in it."""

    task_id: str = "task_id"
    attempt_number: str = "attempt_number"
    name: str = "name"
    type: str = "type"
    func_or_class_name: str = "func_or_class_name"
    language: str = "language"
    required_resources: str = "required_resources"
    runtime_env_info: str = "runtime_env_info"
    placement_group_id: str = "placement_group_id"
    parent_task_id: str = "parent_task_id"
    job_id: str = "job_id"
    actor_id: str = "actor_id"
    call_site: str = "call_site"
    label_selector: str = "label_selector"
    events: str = "events"
    state: str = "state"
    node_id: str = "node_id"
    worker_id: str = "worker_id"
    worker_pid: str = "worker_pid"
    error_type: str = "error_type"
    error_message: str = "error_message"
    task_log_info: str = "task_log_info"
    creation_time_ms: str = "creation_time_ms"
    start_time_ms: str = "start_time_ms"
    end_time_ms: str = "end_time_ms"
    # runtime_env_info's
    serialized_runtime_env: str = "serialized_runtime_env"
    # each of `events`: a transition
    created_ms: str = "created_ms"
    created_ns: str = "created_ns"
    # task_log_info's
    stdout_file: str = "stdout_file"
    stderr_file: str = "stderr_file"
    stdout_start: str = "stdout_start"
    stdout_end: str = "stdout_end"
    stderr_start: str = "stderr_start"
    stderr_end: str = "stderr_end"


TASK_ROW = TaskRow()


def _task_status(number: int) -> str:
    return common_pb2.TaskStatus.Name(number)


@dataclasses.dataclass(frozen=True, slots=True)  # slots: an attribute read is a fast one
class TaskValues:
    """The values the task folds write where a piece says nothing, and the task states that set a
    row's times (the first pending one its creation, the first running one its start, the last
    ended one its end)."""

    nil: str  # a task's state before a lifecycle piece says
    actor_task: str  # the type of an actor's task
    normal_task: str  # a task's type before its definition says
    python: str  # its language before its definition says
    empty_runtime_env: str  # its serialized runtime env when the definition has none
    pending: tuple[str, ...]
    running: tuple[str, ...]
    ended: tuple[str, ...]


TASK_VALUES = TaskValues(
    nil=_task_status(common_pb2.NIL),
    actor_task=common_pb2.TaskType.Name(common_pb2.ACTOR_TASK),
    normal_task=common_pb2.TaskType.Name(common_pb2.NORMAL_TASK),
    python=common_pb2.Language.Name(common_pb2.PYTHON),
    empty_runtime_env="{}",
    pending=(_task_status(common_pb2.PENDING_ARGS_AVAIL), _task_status(common_pb2.PENDING_NODE_ASSIGNMENT)),
    running=(_task_status(common_pb2.RUNNING),),
    ended=(_task_status(common_pb2.FINISHED), _task_status(common_pb2.FAILED)),
)
