"""A small API to build RayEvents for tasks, actor tasks, actors, jobs, nodes and workers.

Each method returns a `RayEvent` whose envelope (type, source, severity, session, creation time)
is filled from the registry; `event_id` and `node_id` are left to the recorder, which stamps them at
export like Ray's does. Lifecycle methods take one state (the transition entered now, or at
`timestamp_ns`): the recorder merges transitions of the same entity into one event per export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from ray_otel_events.events.registry import ET, REGISTRY
from ray_otel_events.protobuf import common_pb2
from ray_otel_events.protobuf.events_actor_lifecycle_event_pb2 import ActorLifecycleEvent
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_driver_job_lifecycle_event_pb2 import DriverJobLifecycleEvent
from ray_otel_events.protobuf.events_node_lifecycle_event_pb2 import NodeLifecycleEvent
from ray_otel_events.protobuf.events_worker_lifecycle_event_pb2 import WorkerLifecycleEvent

TaskStatus = common_pb2.TaskStatus
TaskType = common_pb2.TaskType
ActorState = ActorLifecycleEvent.State
JobState = DriverJobLifecycleEvent.State
NodeState = NodeLifecycleEvent.State
WorkerState = WorkerLifecycleEvent.State
_INFO = int(RayEvent.Severity.INFO)  # a plain int: the enum wrapper resolves names in Python


def _set_timestamp(target: object, ns: int) -> None:
    target.FromNanoseconds(ns)  # type: ignore[attr-defined]


def python_function(
    module: str, function: str, class_name: str = "", function_hash: str = ""
) -> common_pb2.FunctionDescriptor:
    return common_pb2.FunctionDescriptor(
        python_function_descriptor=common_pb2.PythonFunctionDescriptor(
            module_name=module, class_name=class_name, function_name=function, function_hash=function_hash
        )
    )


def task_error(error_type: int, message: str) -> common_pb2.RayErrorInfo:
    """The error info of a failed task (e.g. ErrorType TASK_EXECUTION_EXCEPTION and the traceback)."""
    return common_pb2.RayErrorInfo(error_type=error_type, error_message=message)  # type: ignore[arg-type]


class EventFactory:
    """Builds events stamped with one session name and a clock (replaceable for tests)."""

    def __init__(self, session_name: str = "", clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.session_name = session_name
        self.clock_ns = clock_ns

    def _envelope(self, event_type: int, timestamp_ns: int | None) -> tuple[RayEvent, int]:
        spec = REGISTRY[event_type]
        ns = self.clock_ns() if timestamp_ns is None else timestamp_ns
        event = RayEvent(
            event_type=event_type,  # type: ignore[arg-type]
            source_type=spec.source_type,  # type: ignore[arg-type]
            severity=_INFO,  # type: ignore[arg-type]
            session_name=self.session_name,
        )
        _set_timestamp(event.timestamp, ns)
        return event, ns

    # -- tasks ---------------------------------------------------------------------------------

    def task_definition(
        self,
        *,
        task_id: bytes,
        job_id: bytes,
        name: str,
        function: common_pb2.FunctionDescriptor,
        attempt: int = 0,
        task_type: int = TaskType.NORMAL_TASK,
        parent_task_id: bytes = b"",
        required_resources: Mapping[str, float] | None = None,
        placement_group_id: bytes = b"",
        serialized_runtime_env: str = "",
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.TASK_DEFINITION_EVENT, timestamp_ns)
        p = event.task_definition_event
        p.task_id = task_id
        p.task_attempt = attempt
        p.task_type = task_type  # type: ignore[assignment]
        p.language = common_pb2.PYTHON
        p.task_func.CopyFrom(function)
        p.task_name = name
        p.required_resources.update(required_resources or {})
        p.job_id = job_id
        p.parent_task_id = parent_task_id
        p.placement_group_id = placement_group_id
        p.serialized_runtime_env = serialized_runtime_env
        return event

    def actor_task_definition(
        self,
        *,
        task_id: bytes,
        job_id: bytes,
        actor_id: bytes,
        name: str,
        function: common_pb2.FunctionDescriptor,
        attempt: int = 0,
        parent_task_id: bytes = b"",
        required_resources: Mapping[str, float] | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.ACTOR_TASK_DEFINITION_EVENT, timestamp_ns)
        p = event.actor_task_definition_event
        p.task_id = task_id
        p.task_attempt = attempt
        p.language = common_pb2.PYTHON
        p.actor_func.CopyFrom(function)
        p.actor_task_name = name
        p.required_resources.update(required_resources or {})
        p.job_id = job_id
        p.actor_id = actor_id
        p.parent_task_id = parent_task_id
        return event

    def task_lifecycle(
        self,
        *,
        task_id: bytes,
        job_id: bytes,
        state: int,
        attempt: int = 0,
        node_id: bytes = b"",
        worker_id: bytes = b"",
        worker_pid: int = 0,
        error: common_pb2.RayErrorInfo | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, ns = self._envelope(ET.TASK_LIFECYCLE_EVENT, timestamp_ns)
        p = event.task_lifecycle_event
        p.task_id = task_id
        p.task_attempt = attempt
        transition = p.state_transitions.add(state=state)
        _set_timestamp(transition.timestamp, ns)
        p.node_id = node_id
        p.worker_id = worker_id
        p.worker_pid = worker_pid
        p.job_id = job_id
        if error is not None:
            p.ray_error_info.CopyFrom(error)
        return event

    def task_profile(
        self,
        *,
        task_id: bytes,
        job_id: bytes,
        event_name: str,
        start_ns: int,
        end_ns: int,
        attempt: int = 0,
        component_type: str = "worker",
        component_id: bytes = b"",
        node_ip_address: str = "",
        extra_data: str | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.TASK_PROFILE_EVENT, start_ns)
        p = event.task_profile_events
        p.task_id = task_id
        p.attempt_number = attempt
        p.job_id = job_id
        p.profile_events.component_type = component_type
        p.profile_events.component_id = component_id
        p.profile_events.node_ip_address = node_ip_address
        entry = p.profile_events.events.add(start_time=start_ns, end_time=end_ns, event_name=event_name)
        if extra_data is not None:
            entry.extra_data = extra_data
        return event

    # -- actors --------------------------------------------------------------------------------

    def actor_definition(
        self,
        *,
        actor_id: bytes,
        job_id: bytes,
        class_name: str,
        name: str = "",
        ray_namespace: str = "",
        is_detached: bool = False,
        required_resources: Mapping[str, float] | None = None,
        parent_id: bytes = b"",
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.ACTOR_DEFINITION_EVENT, timestamp_ns)
        p = event.actor_definition_event
        p.actor_id = actor_id
        p.job_id = job_id
        p.is_detached = is_detached
        p.name = name
        p.ray_namespace = ray_namespace
        p.class_name = class_name
        p.required_resources.update(required_resources or {})
        p.parent_id = parent_id
        return event

    def actor_lifecycle(
        self,
        *,
        actor_id: bytes,
        state: int,
        node_id: bytes = b"",
        worker_id: bytes = b"",
        pid: int = 0,
        repr_name: str = "",
        death_cause: common_pb2.ActorDeathCause | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, ns = self._envelope(ET.ACTOR_LIFECYCLE_EVENT, timestamp_ns)
        p = event.actor_lifecycle_event
        p.actor_id = actor_id
        transition = p.state_transitions.add(
            state=state,
            node_id=node_id,
            worker_id=worker_id,
            pid=pid,
            repr_name=repr_name,
        )
        _set_timestamp(transition.timestamp, ns)
        if death_cause is not None:
            transition.death_cause.CopyFrom(death_cause)
        return event

    # -- jobs ----------------------------------------------------------------------------------

    def job_definition(
        self,
        *,
        job_id: bytes,
        driver_pid: int,
        entrypoint: str,
        driver_node_id: bytes = b"",
        metadata: Mapping[str, str] | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.DRIVER_JOB_DEFINITION_EVENT, timestamp_ns)
        p = event.driver_job_definition_event
        p.job_id = job_id
        p.driver_pid = driver_pid
        p.driver_node_id = driver_node_id
        p.entrypoint = entrypoint
        p.config.metadata.update(metadata or {})
        return event

    def job_lifecycle(self, *, job_id: bytes, state: int, timestamp_ns: int | None = None) -> RayEvent:
        event, ns = self._envelope(ET.DRIVER_JOB_LIFECYCLE_EVENT, timestamp_ns)
        p = event.driver_job_lifecycle_event
        p.job_id = job_id
        _set_timestamp(p.state_transitions.add(state=state).timestamp, ns)
        return event

    # -- nodes ---------------------------------------------------------------------------------

    def node_definition(
        self,
        *,
        node_id: bytes,
        node_ip_address: str,
        hostname: str = "",
        node_name: str = "",
        labels: Mapping[str, str] | None = None,
        start_ns: int | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, ns = self._envelope(ET.NODE_DEFINITION_EVENT, timestamp_ns)
        p = event.node_definition_event
        p.node_id = node_id
        p.node_ip_address = node_ip_address
        p.labels.update(labels or {})
        _set_timestamp(p.start_timestamp, ns if start_ns is None else start_ns)
        p.hostname = hostname
        p.node_name = node_name
        return event

    def node_lifecycle(
        self,
        *,
        node_id: bytes,
        state: int,
        resources: Mapping[str, float] | None = None,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, ns = self._envelope(ET.NODE_LIFECYCLE_EVENT, timestamp_ns)
        p = event.node_lifecycle_event
        p.node_id = node_id
        transition = p.state_transitions.add(state=state)
        _set_timestamp(transition.timestamp, ns)
        transition.resources.update(resources or {})
        return event

    # -- workers -------------------------------------------------------------------------------

    def worker_definition(
        self,
        *,
        worker_id: bytes,
        node_id: bytes,
        pid: int,
        worker_type: int = 0,
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, _ = self._envelope(ET.WORKER_DEFINITION_EVENT, timestamp_ns)
        p = event.worker_definition_event
        p.worker_id = worker_id
        p.node_id = node_id
        p.worker_type = worker_type  # type: ignore[assignment]
        p.pid = pid
        return event

    def worker_lifecycle(
        self,
        *,
        worker_id: bytes,
        state: int,
        job_id: bytes = b"",
        exit_type: int | None = None,
        exit_detail: str = "",
        timestamp_ns: int | None = None,
    ) -> RayEvent:
        event, ns = self._envelope(ET.WORKER_LIFECYCLE_EVENT, timestamp_ns)
        p = event.worker_lifecycle_event
        p.worker_id = worker_id
        p.job_id = job_id
        transition = p.state_transitions.add(state=state)
        _set_timestamp(transition.timestamp, ns)
        ms = ns // 1_000_000
        if state == WorkerState.ALIVE:
            transition.start_time_ms = ms
        else:
            transition.end_time_ms = ms
        if exit_type is not None:
            transition.death_info.exit_type = exit_type  # type: ignore[assignment]
            transition.death_info.exit_detail = exit_detail
        return event
