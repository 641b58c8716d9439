"""The log records of a task's RayEvents, written from what its spans say, without the RayEvent.

The OTLP hook sends every event a traced task implies (its definition and lifecycle events) as a
log record: `log_records.log_record_wire` of the event. Building each event as a protobuf message
field by field and then reading it back into JSON for its record was most of the hook's cost. A
task's events differ from the previous task's in their ids and times only, so records are written
by shape (`log_records.RecordShape`): per kind of event and what stays (session, job, function,
worker, states), one event is built and read into JSON once; each later one is that JSON with its
own task id, parent, times and error message put in, walked into its record. The records are
byte for byte `log_record_wire` of the event `task_spans.build_event` makes (tests hold them to
it); an event this does not shape (actors' own events, a time before 1970 or after 9999, an empty
task id) is built and written that way.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ray_otel_events.encoding.ray_json import TIMESTAMP_SECONDS_MAX, base64_text, timestamp_text
from ray_otel_events.events.builders import EventFactory
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.log_records import RecordShape, Slot, TemplateParts, log_record_wire, shape_of
from ray_otel_events.otel.task_spans import SpanEvent, TaskDefinition, TaskFacts, TaskTransitions, build_event
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

# JSON names of the fields written per event (as `RayEventJsonEncoder` writes them).
_TIMESTAMP = "timestamp"
_TASK_ID = "taskId"
_PARENT = "parentTaskId"
_TRANSITIONS = "stateTransitions"
_ERROR = "rayErrorInfo"
_MESSAGE = "errorMessage"
_PAYLOADS: dict[int, str] = {
    RayEvent.TASK_DEFINITION_EVENT: "taskDefinitionEvent",
    RayEvent.ACTOR_TASK_DEFINITION_EVENT: "actorTaskDefinitionEvent",
}
_LIFECYCLE = "taskLifecycleEvent"

_TIME_LIMIT = (TIMESTAMP_SECONDS_MAX + 1) * 1_000_000_000  # an event at or past it takes log_record_wire
SHAPES_MAX = 1024  # kinds of event kept; a process traces a handful of functions on one worker

# (shape, its values in slot order, the record's time) of an event written by shape
_Shaped = tuple[RecordShape, list[Any], int]


class TaskEventRecords:
    """Writes the log records of the `SpanEvent`s `task_spans.TaskSpanEvents` makes; one per sink.

    Its only state is the shapes it made (at most `max_shapes`, all dropped when one more is
    needed), and a shape never changes once made: calls from several threads at once could at
    worst make one twice. (The processor's sinks are called one batch at a time anyway, from
    whichever thread drains its queue under the queue's lock.)"""

    def __init__(self, extra_attributes: bytes = b"", *, max_shapes: int = SHAPES_MAX) -> None:
        self.extra_attributes = extra_attributes
        self.max_shapes = max_shapes
        # shape key -> its shape, or None: events of that kind are built and walked whole
        self._shapes: dict[Hashable, RecordShape | None] = {}

    def record(self, item: SpanEvent, observed_time_unix_nano: int) -> bytes:
        """`log_record_wire(item.event, ...)` with the span's ids and flags and `extra_attributes`."""
        context = item.span_context
        trace_id = context.trace_id.to_bytes(16, "big")
        span_id = context.span_id.to_bytes(8, "big")
        flags = int(context.trace_flags)
        facts, factory = item.facts, item.factory
        if factory is not None and facts is not None:
            return self.record_and_template(
                factory, facts, trace_id, span_id, flags, observed_time_unix_nano
            )[0]
        return log_record_wire(
            item.event,
            trace_id,
            span_id,
            observed_time_unix_nano,
            flags=flags,
            extra_attributes=self.extra_attributes,
        )

    def record_and_template(
        self,
        factory: EventFactory,
        facts: TaskFacts,
        trace_id: bytes,
        span_id: bytes,
        flags: int,
        observed_time_unix_nano: int,
    ) -> tuple[bytes, TemplateParts | None]:
        """The record of a task's facts (as `record` writes it), and the parts of the template it
        was written from, None when there is none: compiled code (the spool forwarder's) writes
        the records of the same shape and value lengths from them."""
        shaped = None
        if type(facts) is TaskTransitions:
            shaped = self._transitions(factory, facts)
        elif type(facts) is TaskDefinition:
            shaped = self._definition(factory, facts)
        if shaped is not None:
            shape, values, time_ns = shaped
            return shape.record_and_parts(
                values, time_ns, trace_id, span_id, observed_time_unix_nano, flags, self.extra_attributes
            )
        record = log_record_wire(
            build_event(factory, facts),
            trace_id,
            span_id,
            observed_time_unix_nano,
            flags=flags,
            extra_attributes=self.extra_attributes,
        )
        return record, None

    # -- per kind of event: its shape's key, slots and values ------------------------------------

    def _definition(self, factory: EventFactory, facts: TaskDefinition) -> _Shaped | None:
        time_ns = facts.timestamp_ns
        if not facts.task_id or not 0 <= time_ns < _TIME_LIMIT:
            return None  # an empty id would move in the event's JSON (to the end, as a default)
        parent = facts.parent_task
        values = [timestamp_text(time_ns), base64_text(facts.task_id), facts.task_id.hex()]
        if parent:
            values += (base64_text(parent), parent.hex())
        key = (
            factory,
            factory.session_name,
            facts.event_type,
            facts.job,
            facts.actor,
            facts.name,
            facts.module,
            facts.function,
            facts.class_name,
            facts.task_type,
            bool(parent),
        )
        try:
            shape = self._shapes[key]
        except KeyError:
            payload = _PAYLOADS[facts.event_type]
            slots: dict[Slot, int] = {(_TIMESTAMP,): 0, (payload, _TASK_ID): 1}
            attribute_slots = {semconv.RAY_TASK_ID: 2}
            if parent:
                slots[(payload, _PARENT)] = 3
                attribute_slots[semconv.RAY_PARENT_TASK_ID] = 4
            shape = self._made(key, build_event(factory, facts), slots, attribute_slots, values)
        if shape is None:
            return None
        return shape, values, otlp_wire.time_or_unknown(time_ns)

    def _transitions(self, factory: EventFactory, facts: TaskTransitions) -> _Shaped | None:
        transitions = facts.transitions
        if not facts.task_id or not transitions:
            return None
        for _, at in transitions:
            if not 0 <= at < _TIME_LIMIT:
                return None
        times = [timestamp_text(at) for _, at in transitions]
        message = facts.error_message
        values: list[Any] = [times[0], base64_text(facts.task_id), facts.task_id.hex(), *times]
        if message:
            values.append(message)
        key = (
            factory,
            factory.session_name,
            facts.job,
            tuple(state for state, _ in transitions),
            facts.node,
            facts.worker,
            facts.pid,
            None if message is None else bool(message),
        )
        try:
            shape = self._shapes[key]
        except KeyError:
            slots: dict[Slot, int] = {(_TIMESTAMP,): 0, (_LIFECYCLE, _TASK_ID): 1}
            for i in range(len(transitions)):
                slots[(_LIFECYCLE, _TRANSITIONS, i, _TIMESTAMP)] = 3 + i
            if message:
                slots[(_LIFECYCLE, _ERROR, _MESSAGE)] = 3 + len(transitions)
            shape = self._made(key, build_event(factory, facts), slots, {semconv.RAY_TASK_ID: 2}, values)
        if shape is None:
            return None
        return shape, values, otlp_wire.time_or_unknown(transitions[0][1])

    def _made(
        self,
        key: Hashable,
        event: RayEvent,
        slots: dict[Slot, int],
        attribute_slots: dict[str, int],
        values: list[Any],
    ) -> RecordShape | None:
        """The shape of `event`'s kind (None: not one `shape_of` makes), kept under `key`. `event`
        is built for it, not the item's: a recorder sink holds that one and stamps or merges into it
        on its own thread, which would bake one event's id into every record of the kind."""
        if len(self._shapes) >= self.max_shapes:
            self._shapes.clear()
        shape = self._shapes[key] = shape_of(event, slots, attribute_slots, values)
        return shape
