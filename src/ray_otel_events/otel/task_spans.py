"""Task and actor spans (Ray's and ours) read as RayEvents.

A task is two spans: the submitter's PRODUCER span `<module>.<func> ray.remote` and the executor's
CONSUMER span `... ray.remote_worker`, its child across processes. Both carry Ray's `ray.*`
attributes (`ray.remote` is "function" or "actor"). From them we build what Ray's core workers
would have recorded: on the submit side a definition plus one lifecycle event with
PENDING_ARGS_AVAIL (span start) and SUBMITTED_TO_WORKER (span end); on the execute side RUNNING
(span start) and FINISHED or FAILED (span end, ERROR status); for `__init__` also the actor's
definition and lifecycle.

Ids. Ray's submit spans do not say which task they submit (a driver's carry no task id, a nested
one carries its *parent's*), so both sides derive the task id from the same facts: the trace id and
the submit span's id (the execute span's parent), hashed into the unique part of Ray's TaskID
layout, followed by the actor part (nil actor of the job for normal tasks, the actor id for actor
tasks). Actor creation tasks use Ray's own layout (nil unique part + actor id). Ray's real task id
stays on the span as `ray.task_id`. Retries of a Ray task share one derived id and attempt 0.
See docs/tracing.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from ray_otel_events.events import ids
from ray_otel_events.events.builders import (
    ActorState,
    EventFactory,
    TaskStatus,
    TaskType,
    python_function,
    task_error,
)
from ray_otel_events.otel import semconv
from ray_otel_events.protobuf import common_pb2
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

SUBMIT = "submit"
EXECUTE = "execute"
FUNCTION = "function"
ACTOR = "actor"
INIT = "__init__"

_NIL_UNIQUE = b"\xff" * (ids.TASK_ID_SIZE - ids.ACTOR_ID_SIZE)


def task_role(span: Any) -> str | None:
    """SUBMIT or EXECUTE for a task/actor span (by name suffix, kind and `ray.remote`), else None."""
    name: str = span.name
    if name.endswith(semconv.EXECUTE_SUFFIX):
        role, kind = EXECUTE, SpanKind.CONSUMER
    elif name.endswith(semconv.SUBMIT_SUFFIX):
        role, kind = SUBMIT, SpanKind.PRODUCER
    else:
        return None
    if span.kind is not kind:
        return None
    attrs = span.attributes
    if attrs is None or attrs.get(semconv.RAY_REMOTE) not in (FUNCTION, ACTOR):
        return None
    return role


def derive_task_id(trace_id: int, submit_span_id: int, actor_part: bytes) -> bytes:
    """The task id both sides of a span pair agree on: 8 hashed bytes + the 16-byte actor part."""
    unique = hashlib.blake2b(
        trace_id.to_bytes(16, "big") + submit_span_id.to_bytes(8, "big"), digest_size=8
    ).digest()
    if unique == _NIL_UNIQUE:  # reserved for actor creation tasks
        unique = b"\xfe" + unique[1:]
    return unique + actor_part


def hex_or_empty(value: Any) -> bytes:
    """An id attribute's bytes: b"" when it is missing, not a string or not hex."""
    if not isinstance(value, str):
        return b""
    try:
        return bytes.fromhex(value)
    except ValueError:
        return b""


def _hex_bytes(attrs: Mapping[str, Any], key: str, size: int) -> bytes | None:
    raw = hex_or_empty(attrs.get(key))
    return raw if raw and len(raw) == size else None


def _opt_hex(attrs: Mapping[str, Any], key: str) -> bytes:
    return hex_or_empty(attrs.get(key))


def _int(attrs: Mapping[str, Any], key: str) -> int:
    try:
        return int(attrs.get(key, 0))
    except (TypeError, ValueError):
        return 0


def _error_message(span: Any) -> str:
    for event in reversed(span.events):
        if event.name == "exception" and event.attributes:
            trace_text = event.attributes.get("exception.stacktrace")
            if isinstance(trace_text, str) and trace_text:
                return trace_text
    description: str | None = span.status.description
    return description or "task failed"


def _append_transition(lifecycle: Any, state: int, timestamp_ns: int) -> None:
    """A second transition known at the same moment (a span's end): one event, as the recorder's
    merge of two single-transition events would make it."""
    lifecycle.state_transitions.add(state=state).timestamp.FromNanoseconds(timestamp_ns)


class SpanEvent(NamedTuple):
    """One RayEvent and the span it belongs to (for log records' trace and span ids)."""

    event: RayEvent
    span_context: SpanContext


_functions: dict[tuple[str, str, str], common_pb2.FunctionDescriptor] = {}


def _function(module: str, function: str, class_name: str = "") -> common_pb2.FunctionDescriptor:
    """`python_function(...)`, one message per name kept (bounded) and only ever copied from: a
    process submits a handful of functions many times, and a descriptor costs 1.3 us to build."""
    key = (module, function, class_name)
    descriptor = _functions.get(key)
    if descriptor is None:
        if len(_functions) >= 1024:
            _functions.clear()
        descriptor = _functions[key] = python_function(module, function, class_name=class_name)
    return descriptor


class UnmappableSpan(ValueError):
    """A task/actor span whose attributes cannot identify its task (e.g. no valid `ray.job_id`)."""


class TaskSpanEvents:
    """Turns task/actor span starts and ends into RayEvents; one instance per process.

    Not thread-safe: the processor calls it from its single background thread, in span order
    (an execute span's start, then spans nested in it, then its end). That order lets a nested
    submit span find its parent task among the execute spans still open in this process.
    """

    def __init__(self, factory: EventFactory) -> None:
        self.factory = factory
        self._open_by_span: dict[int, bytes] = {}  # execute span id -> derived task id
        self._open_by_ray_id: dict[bytes, bytes] = {}  # task id from `ray.task_id` -> derived id

    # -- entry points ------------------------------------------------------------------------

    def started(self, span: Any) -> list[SpanEvent]:
        """Events known when an execute span starts (RUNNING); submit spans wait for their end."""
        if task_role(span) != EXECUTE:
            return []
        attrs: Mapping[str, Any] = span.attributes or {}
        task_id, job = self._execute_ids(span, attrs)
        self._open_by_span[span.context.span_id] = task_id
        ray_task = _opt_hex(attrs, semconv.RAY_TASK_ID)
        if ray_task:
            self._open_by_ray_id[ray_task] = task_id
        return [self._lifecycle(span, task_id, job, TaskStatus.RUNNING, span.start_time, attrs)]

    def ended(self, span: ReadableSpan) -> list[SpanEvent]:
        role = task_role(span)
        if role == SUBMIT:
            return self._submit_ended(span)
        if role == EXECUTE:
            return self._execute_ended(span)
        return []

    # -- ids ---------------------------------------------------------------------------------

    def _job(self, attrs: Mapping[str, Any]) -> bytes:
        job = _hex_bytes(attrs, semconv.RAY_JOB_ID, ids.JOB_ID_SIZE)
        if job is None:
            raise UnmappableSpan(f"{semconv.RAY_JOB_ID}={attrs.get(semconv.RAY_JOB_ID)!r} is not a job id")
        return job

    def _actor(self, attrs: Mapping[str, Any]) -> bytes:
        actor = _hex_bytes(attrs, semconv.RAY_ACTOR_ID, ids.ACTOR_ID_SIZE)
        if actor is None:
            raise UnmappableSpan(
                f"{semconv.RAY_ACTOR_ID}={attrs.get(semconv.RAY_ACTOR_ID)!r} is not an actor id"
            )
        return actor

    def _task_id(self, attrs: Mapping[str, Any], trace_id: int, submit_span_id: int, job: bytes) -> bytes:
        if attrs.get(semconv.RAY_REMOTE) == ACTOR:
            actor = self._actor(attrs)
            if attrs.get(semconv.RAY_ACTOR_METHOD) == INIT:
                return ids.actor_creation_task_id(actor)
            return derive_task_id(trace_id, submit_span_id, actor)
        return derive_task_id(trace_id, submit_span_id, ids.nil_actor_id(job))

    def _execute_ids(self, span: Any, attrs: Mapping[str, Any]) -> tuple[bytes, bytes]:
        job = self._job(attrs)
        parent = span.parent
        submit_span_id = parent.span_id if parent is not None else span.context.span_id
        return self._task_id(attrs, span.context.trace_id, submit_span_id, job), job

    def _parent_task(self, span: ReadableSpan, attrs: Mapping[str, Any], job: bytes) -> bytes:
        parent = span.parent
        if parent is not None and parent.span_id in self._open_by_span:
            return self._open_by_span[parent.span_id]
        running = _opt_hex(attrs, semconv.RAY_TASK_ID)
        if running:
            return self._open_by_ray_id.get(running, running)
        return ids.driver_task_id(job)

    # -- submit side -------------------------------------------------------------------------

    def _submit_ended(self, span: ReadableSpan) -> list[SpanEvent]:
        attrs: Mapping[str, Any] = span.attributes or {}
        job = self._job(attrs)
        ctx = span.context
        task_id = self._task_id(attrs, ctx.trace_id, ctx.span_id, job)
        parent_task = self._parent_task(span, attrs, job)
        start, end = span.start_time or 0, span.end_time or 0
        f = self.factory
        out: list[RayEvent] = []
        if attrs.get(semconv.RAY_REMOTE) == ACTOR:
            actor = self._actor(attrs)
            class_name = str(attrs.get(semconv.RAY_ACTOR_CLASS, "")).rsplit(".", 1)[-1]
            method = str(attrs.get(semconv.RAY_ACTOR_METHOD, ""))
            function = _function("", method, class_name)
            if method == INIT:
                out.append(
                    f.task_definition(
                        task_id=task_id,
                        job_id=job,
                        name=f"{class_name}.{method}",
                        function=function,
                        task_type=TaskType.ACTOR_CREATION_TASK,
                        parent_task_id=parent_task,
                        timestamp_ns=start,
                    )
                )
                out.append(
                    f.actor_definition(
                        actor_id=actor,
                        job_id=job,
                        class_name=class_name,
                        parent_id=parent_task,
                        timestamp_ns=start,
                    )
                )
                pending = f.actor_lifecycle(
                    actor_id=actor, state=ActorState.DEPENDENCIES_UNREADY, timestamp_ns=start
                )
                _append_transition(pending.actor_lifecycle_event, ActorState.PENDING_CREATION, end)
                out.append(pending)
            else:
                out.append(
                    f.actor_task_definition(
                        task_id=task_id,
                        job_id=job,
                        actor_id=actor,
                        name=f"{class_name}.{method}",
                        function=function,
                        parent_task_id=parent_task,
                        timestamp_ns=start,
                    )
                )
        else:
            qualified = str(attrs.get(semconv.RAY_FUNCTION, ""))
            module, _, func = qualified.rpartition(".")
            out.append(
                f.task_definition(
                    task_id=task_id,
                    job_id=job,
                    name=func,
                    function=_function(module, func),
                    parent_task_id=parent_task,
                    timestamp_ns=start,
                )
            )
        submitted = f.task_lifecycle(
            task_id=task_id, job_id=job, state=TaskStatus.PENDING_ARGS_AVAIL, timestamp_ns=start
        )
        _append_transition(submitted.task_lifecycle_event, TaskStatus.SUBMITTED_TO_WORKER, end)
        out.append(submitted)
        return [SpanEvent(event, ctx) for event in out]

    # -- execute side ------------------------------------------------------------------------

    def _lifecycle(
        self,
        span: Any,
        task_id: bytes,
        job: bytes,
        state: int,
        timestamp_ns: int,
        attrs: Mapping[str, Any],
        error: common_pb2.RayErrorInfo | None = None,
    ) -> SpanEvent:
        event = self.factory.task_lifecycle(
            task_id=task_id,
            job_id=job,
            state=state,
            node_id=_opt_hex(attrs, semconv.RAY_NODE_ID),
            worker_id=_opt_hex(attrs, semconv.RAY_WORKER_ID),
            worker_pid=_int(attrs, semconv.RAY_PID),
            error=error,
            timestamp_ns=timestamp_ns,
        )
        return SpanEvent(event, span.context)

    def _execute_ended(self, span: ReadableSpan) -> list[SpanEvent]:
        attrs: Mapping[str, Any] = span.attributes or {}
        ctx = span.context
        task_id = self._open_by_span.pop(ctx.span_id, None)
        if task_id is None:
            task_id, job = self._execute_ids(span, attrs)
        else:
            job = self._job(attrs)
        ray_task = _opt_hex(attrs, semconv.RAY_TASK_ID)
        if ray_task:
            self._open_by_ray_id.pop(ray_task, None)
        end = span.end_time or 0
        failed = span.status.status_code is StatusCode.ERROR
        message = _error_message(span) if failed else ""
        error = task_error(common_pb2.TASK_EXECUTION_EXCEPTION, message) if failed else None
        state = TaskStatus.FAILED if failed else TaskStatus.FINISHED
        out = [self._lifecycle(span, task_id, job, state, end, attrs, error)]
        if attrs.get(semconv.RAY_REMOTE) == ACTOR and attrs.get(semconv.RAY_ACTOR_METHOD) == INIT:
            actor = self._actor(attrs)
            death: common_pb2.ActorDeathCause | None = None
            if failed:
                death = common_pb2.ActorDeathCause(
                    creation_task_failure_context=common_pb2.RayException(
                        language=common_pb2.PYTHON, formatted_exception_string=message
                    )
                )
            event = self.factory.actor_lifecycle(
                actor_id=actor,
                state=ActorState.DEAD if failed else ActorState.ALIVE,
                node_id=_opt_hex(attrs, semconv.RAY_NODE_ID),
                worker_id=_opt_hex(attrs, semconv.RAY_WORKER_ID),
                pid=_int(attrs, semconv.RAY_PID),
                death_cause=death,
                timestamp_ns=end,
            )
            out.append(SpanEvent(event, ctx))
        return out
