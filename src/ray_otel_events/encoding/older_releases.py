"""Events of Ray releases older than our protos (Ray 2.60's), read by their JSON names.

Ray 2.49 sends TASK_EXECUTION_EVENT (type 2, payload field 9 `taskExecutionEvent`) where later
releases send TASK_LIFECYCLE_EVENT (type 2, field 9 `taskLifecycleEvent`): the same fields by the
same JSON names, except that its states are a `taskState` map of TaskStatus number (as JSON text)
to time, where later ones send `stateTransitions`. 2.49's TaskStatus numbers are 2.60's (which adds
13). Our protos no longer name any of this, so the names are typed here, as Ray 2.49.2's
events_task_execution_event.proto and events_base_event.proto give them. On the wire (gRPC) the map's
entries are StateTransitions, so nothing is needed there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ray_otel_events.events.registry import ET, REGISTRY, event_type_name
from ray_otel_events.protobuf.common_pb2 import TaskStatus
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent


@dataclasses.dataclass(frozen=True, slots=True)
class Ray249Names:
    event_type: str = "TASK_EXECUTION_EVENT"
    payload: str = "taskExecutionEvent"
    task_state: str = "taskState"


RAY_2_49 = Ray249Names()
_LIFECYCLE_TYPE = event_type_name(ET.TASK_LIFECYCLE_EVENT)
_LIFECYCLE_PAYLOAD = RayEvent.DESCRIPTOR.fields_by_name[
    REGISTRY[ET.TASK_LIFECYCLE_EVENT].payload_field
].json_name
_TRANSITIONS = TaskLifecycleEvent.DESCRIPTOR.fields_by_name["state_transitions"].json_name
_STATE = TaskLifecycleEvent.StateTransition.DESCRIPTOR.fields_by_name["state"].json_name
_TIMESTAMP = TaskLifecycleEvent.StateTransition.DESCRIPTOR.fields_by_name["timestamp"].json_name


def _status_name(number: str) -> str:
    """A TaskStatus number (a key of the map) as the name later releases send; one our protos do
    not know is kept as its number, not read as another state. ValueError if not a number."""
    value = int(number)
    return TaskStatus.Name(value) if value in TaskStatus.values() else number


def execution_as_lifecycle(body: dict[str, Any]) -> dict[str, Any]:
    """Ray 2.49's execution payload as a TaskLifecycleEvent's (JSON). TypeError or ValueError when
    its `taskState` is not a map of state numbers."""
    states = body.get(RAY_2_49.task_state) or {}
    if not isinstance(states, dict):
        raise TypeError(f"{RAY_2_49.task_state} is a {type(states).__name__}, not a map")
    lifecycle = {key: value for key, value in body.items() if key != RAY_2_49.task_state}
    lifecycle[_TRANSITIONS] = [{_STATE: _status_name(n), _TIMESTAMP: time} for n, time in states.items()]
    return lifecycle


def as_current(item: Any) -> Any:
    """A 2.49 execution event (JSON) as the TASK_LIFECYCLE_EVENT later releases send; any other item
    as it is. ValueError names a 2.49 event of the wrong shape."""
    if not isinstance(item, dict) or item.get("eventType") != RAY_2_49.event_type:
        return item
    body = item.get(RAY_2_49.payload)
    if not isinstance(body, dict):
        raise ValueError(f"{RAY_2_49.event_type} without a {RAY_2_49.payload} object")
    try:
        lifecycle = execution_as_lifecycle(body)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{RAY_2_49.event_type}: {exc}") from None
    current = {k: v for k, v in item.items() if k != RAY_2_49.payload}
    current.update(eventType=_LIFECYCLE_TYPE, **{_LIFECYCLE_PAYLOAD: lifecycle})
    return current
