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


_hex_bytes_of: dict[str, bytes] = {}  # a process's node, worker and job ids recur in every span


def hex_or_empty(value: Any) -> bytes:
    """An id attribute's bytes: b"" when it is missing, not a string or not hex."""
    if type(value) is str:
        known = _hex_bytes_of.get(value)
        if known is not None:
            return known
    elif not isinstance(value, str):
        return b""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return b""
    if len(_hex_bytes_of) >= 1024:
        _hex_bytes_of.clear()
    _hex_bytes_of[value] = raw
    return raw


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


# Enum values read once: a protobuf enum's attribute is a slow lookup, and every task reads several.
_TASK_DEFINITION_EVENT = RayEvent.TASK_DEFINITION_EVENT
_ACTOR_TASK_DEFINITION_EVENT = RayEvent.ACTOR_TASK_DEFINITION_EVENT
_ACTOR_CREATION_TASK = TaskType.ACTOR_CREATION_TASK
_NORMAL_TASK = TaskType.NORMAL_TASK
_PENDING_ARGS_AVAIL = TaskStatus.PENDING_ARGS_AVAIL
_SUBMITTED_TO_WORKER = TaskStatus.SUBMITTED_TO_WORKER
_RUNNING = TaskStatus.RUNNING
_FAILED = TaskStatus.FAILED
_FINISHED = TaskStatus.FINISHED


class TaskDefinition(NamedTuple):
    """What a submit span says of its task's definition event (a normal or an actor task's)."""

    event_type: int  # TASK_DEFINITION_EVENT or ACTOR_TASK_DEFINITION_EVENT
    task_id: bytes
    job: bytes
    actor: bytes  # b"" but for an actor task
    name: str
    module: str
    function: str
    class_name: str
    task_type: int
    parent_task: bytes
    timestamp_ns: int


class TaskTransitions(NamedTuple):
    """What a task span says of one of its task's lifecycle events: the states it entered, when."""

    task_id: bytes
    job: bytes
    transitions: tuple[tuple[int, int], ...]  # (state, unix nanoseconds); the event's time is the first's
    node: bytes
    worker: bytes
    pid: int
    error_message: str | None  # a failure's message (TASK_EXECUTION_EXCEPTION), None when none


TaskFacts = TaskDefinition | TaskTransitions


class SpanEvent:
    """One RayEvent a span implies, and the span it belongs to (for log records' trace and span
    ids). A task's events are held as their facts and built into a RayEvent on first use of `event`:
    a sink that writes their log records from the facts (otel/task_records.py) never builds one."""

    __slots__ = ("_event", "factory", "facts", "span_context")

    def __init__(
        self,
        span_context: SpanContext,
        *,
        event: RayEvent | None = None,
        facts: TaskFacts | None = None,
        factory: EventFactory | None = None,
    ) -> None:
        if event is None and (facts is None or factory is None):
            raise ValueError("a SpanEvent is an event, or facts and the factory that builds them")
        self.span_context = span_context
        self.facts = facts
        self.factory = factory
        self._event = event

    @property
    def event(self) -> RayEvent:
        event = self._event
        if event is None:
            assert self.factory is not None and self.facts is not None  # as the constructor checked
            event = self._event = build_event(self.factory, self.facts)
        return event


def build_event(factory: EventFactory, facts: TaskFacts) -> RayEvent:
    """The RayEvent of a task's facts, as the factory builds it."""
    if type(facts) is TaskTransitions:
        (state, start), *more = facts.transitions
        message = facts.error_message
        event = factory.task_lifecycle(
            task_id=facts.task_id,
            job_id=facts.job,
            state=state,
            node_id=facts.node,
            worker_id=facts.worker,
            worker_pid=facts.pid,
            error=None if message is None else task_error(common_pb2.TASK_EXECUTION_EXCEPTION, message),
            timestamp_ns=start,
        )
        for state, timestamp_ns in more:
            _append_transition(event.task_lifecycle_event, state, timestamp_ns)
        return event
    assert type(facts) is TaskDefinition
    function = _function(facts.module, facts.function, facts.class_name)
    if facts.event_type == _ACTOR_TASK_DEFINITION_EVENT:
        return factory.actor_task_definition(
            task_id=facts.task_id,
            job_id=facts.job,
            actor_id=facts.actor,
            name=facts.name,
            function=function,
            parent_task_id=facts.parent_task,
            timestamp_ns=facts.timestamp_ns,
        )
    return factory.task_definition(
        task_id=facts.task_id,
        job_id=facts.job,
        name=facts.name,
        function=function,
        task_type=facts.task_type,
        parent_task_id=facts.parent_task,
        timestamp_ns=facts.timestamp_ns,
    )


_functions: dict[tuple[str, str, str], common_pb2.FunctionDescriptor] = {}


def _function(module: str, function: str, class_name: str = "") -> common_pb2.FunctionDescriptor:
    """`python_function(...)`, one message per name kept (bounded) and only ever copied from: a
    process submits a handful of functions many times, and a descriptor is slow to build."""
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

    def open_tasks(self) -> tuple[dict[int, bytes], dict[bytes, bytes]]:
        """The execute spans still open (span id -> derived task id) and their tasks by Ray's id:
        the state compiled code that maps a writer's spans on the same instance keeps with it."""
        return self._open_by_span, self._open_by_ray_id

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
        return [self._lifecycle(span, task_id, job, _RUNNING, span.start_time, attrs)]

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
        out: list[SpanEvent] = []
        if attrs.get(semconv.RAY_REMOTE) == ACTOR:
            actor = self._actor(attrs)
            class_name = str(attrs.get(semconv.RAY_ACTOR_CLASS, "")).rsplit(".", 1)[-1]
            method = str(attrs.get(semconv.RAY_ACTOR_METHOD, ""))
            creation = method == INIT
            out.append(
                self._facts(
                    ctx,
                    TaskDefinition(
                        _TASK_DEFINITION_EVENT if creation else _ACTOR_TASK_DEFINITION_EVENT,
                        task_id,
                        job,
                        b"" if creation else actor,
                        f"{class_name}.{method}",
                        "",
                        method,
                        class_name,
                        _ACTOR_CREATION_TASK if creation else _NORMAL_TASK,
                        parent_task,
                        start,
                    ),
                )
            )
            if creation:
                definition = f.actor_definition(
                    actor_id=actor,
                    job_id=job,
                    class_name=class_name,
                    parent_id=parent_task,
                    timestamp_ns=start,
                )
                pending = f.actor_lifecycle(
                    actor_id=actor, state=ActorState.DEPENDENCIES_UNREADY, timestamp_ns=start
                )
                _append_transition(pending.actor_lifecycle_event, ActorState.PENDING_CREATION, end)
                out += [SpanEvent(ctx, event=definition), SpanEvent(ctx, event=pending)]
        else:
            qualified = str(attrs.get(semconv.RAY_FUNCTION, ""))
            module, _, func = qualified.rpartition(".")
            definition_facts = TaskDefinition(
                _TASK_DEFINITION_EVENT,
                task_id,
                job,
                b"",
                func,
                module,
                func,
                "",
                _NORMAL_TASK,
                parent_task,
                start,
            )
            out.append(self._facts(ctx, definition_facts))
        submitted = ((_PENDING_ARGS_AVAIL, start), (_SUBMITTED_TO_WORKER, end))
        out.append(self._facts(ctx, TaskTransitions(task_id, job, submitted, b"", b"", 0, None)))
        return out

    def _facts(self, span_context: SpanContext, facts: TaskFacts) -> SpanEvent:
        return SpanEvent(span_context, facts=facts, factory=self.factory)

    # -- execute side ------------------------------------------------------------------------

    def _lifecycle(
        self,
        span: Any,
        task_id: bytes,
        job: bytes,
        state: int,
        timestamp_ns: int,
        attrs: Mapping[str, Any],
        error_message: str | None = None,
    ) -> SpanEvent:
        facts = TaskTransitions(
            task_id,
            job,
            ((state, timestamp_ns),),
            _opt_hex(attrs, semconv.RAY_NODE_ID),
            _opt_hex(attrs, semconv.RAY_WORKER_ID),
            _int(attrs, semconv.RAY_PID),
            error_message,
        )
        return SpanEvent(span.context, facts=facts, factory=self.factory)

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
        state = _FAILED if failed else _FINISHED
        out = [self._lifecycle(span, task_id, job, state, end, attrs, message if failed else None)]
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
            out.append(SpanEvent(ctx, event=event))
        return out
