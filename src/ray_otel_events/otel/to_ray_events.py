"""OTLP log records and spans that describe Ray entities, back to RayEvents.

Two sources, one rule against double counting:

* A log record whose event name is `ray.<event type in lower case>` carries a whole RayEvent as its
  body (otel/log_records.py); it becomes exactly that RayEvent. This is how events made by this
  package travel, so the round trip RayEvent -> log record -> OTLP -> RayEvent is lossless.
* A span with Ray's `ray.*` attributes and WITHOUT our producer marker (`ray_otel_events.producer`)
  comes from Ray's own tracing hook; the task/actor span mapping of the tracing side
  (otel/task_spans.py) turns it into task and actor events. Spans with the marker are ours: their
  events already travel as log records, so they are never converted again.

Everything else is "other telemetry" for the caller to forward as plain records.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from ray_otel_events import native
from ray_otel_events.encoding import ray_json_decode
from ray_otel_events.encoding.ray_json_decode import decode_event
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory
from ray_otel_events.events.registry import REGISTRY, entity_key, event_type_name, merge_into
from ray_otel_events.otel import semconv
from ray_otel_events.otel.plain_records import ANY_VALUE_MEMBERS, SpanParts, value_of
from ray_otel_events.otel.task_spans import TaskSpanEvents, UnmappableSpan, hex_or_empty
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

_KNOWN_EVENT_NAMES = frozenset(semconv.event_name_for(spec.name) for spec in REGISTRY.values())
_UNKNOWN_TYPE_NAME = re.compile(re.escape(semconv.EVENT_NAME_PREFIX) + r"\d+")
_LEGACY_EVENT_NAME_ATTR = "event.name"  # before LogRecord.event_name existed


class NotARayEventError(ValueError):
    """An item that claims to describe a Ray entity but cannot be turned into a RayEvent."""


def event_name_of(record: LogRecord) -> str:
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == _LEGACY_EVENT_NAME_ATTR and kv.value.WhichOneof("value") == "string_value":
            return kv.value.string_value
    return ""


def claims_ray_event(record: LogRecord) -> bool:
    """True when the record's event name says its body is a RayEvent."""
    name = event_name_of(record)
    return name in _KNOWN_EVENT_NAMES or _UNKNOWN_TYPE_NAME.fullmatch(name) is not None


def ray_event_from_log_record(record: LogRecord) -> RayEvent:
    """The RayEvent a claiming record carries; NotARayEventError says why it does not."""
    name = event_name_of(record)
    if record.body.WhichOneof("value") != "kvlist_value":
        raise NotARayEventError(f"log record {name!r}: body is not a RayEvent object (expected a kvlist)")
    try:
        # log_records.from_log_body's rule (strict protobuf JSON mapping), by the fast decoder.
        event = decode_event(value_of(record.body))
    except json_format.ParseError as exc:
        raise NotARayEventError(f"log record {name!r}: body is not a RayEvent: {exc}") from None
    expected = semconv.event_name_for(event_type_name(event.event_type))
    if name != expected:
        raise NotARayEventError(f"log record {name!r}: body's eventType means event name {expected!r}")
    return event


try:  # built by setup.py where a C compiler is present
    from ray_otel_events.native import _log_events
except ImportError:
    _log_events = None  # type: ignore[assignment]
_read_log_events: Callable[[bytes], tuple[list[bytes], list[int]] | None] | None = None
if _log_events is not None and ray_json_decode.reads_compiled() and native.ENABLED:
    ray_json_decode.check_wire_kinds(_log_events)
    native.check_numbers(_log_events, ANY_VALUE_MEMBERS)
    _log_events.bind(
        ray_json_decode.event_schema(),
        RayEvent.DESCRIPTOR.fields_by_name["event_type"].number,
        {number: semconv.event_name_for(event_type_name(number)).encode() for number in REGISTRY},
    )
    _read_log_events = _log_events.read


def ray_event_wires(body: bytes) -> tuple[list[bytes], list[int]] | None:
    """The RayEvents (wire bytes, event types) of a protobuf ExportLogsServiceRequest whose every
    record carries one, read in one compiled pass where built: the events `ray_event_from_log_record`
    makes of the decoded request's records, in order (their wire bytes in the body's key order, which
    the RayEvent JSON writer reads alike). None where that pass does not take the request whole (not
    built, a record that is not such a RayEvent, or anything the reader leaves to protobuf): decode it
    and read each record with `claims_ray_event` and `ray_event_from_log_record`, which then give
    the results and every rejection."""
    return _read_log_events(body) if _read_log_events is not None else None


def is_ray_span(attributes: Mapping[str, Any]) -> bool:
    """A span with these attributes carries Ray's `ray.*` attributes and not our producer marker."""
    for key in attributes:
        if key.startswith("ray."):
            return semconv.PRODUCER_ATTR not in attributes
    return False


def readable_span(span: Span, parts: SpanParts, resource: Resource) -> ReadableSpan:
    """An OTLP span (and its `span_parts`, read once by the caller) as the SDK's ReadableSpan, the
    form the tracing side's mapping reads."""
    trace_id = int.from_bytes(span.trace_id, "big")
    flags = TraceFlags(span.flags & 0xFF)
    parent = None
    if span.parent_span_id:
        parent = SpanContext(
            trace_id, int.from_bytes(span.parent_span_id, "big"), is_remote=bool(span.flags & 0x200)
        )
    code = StatusCode(span.status.code) if span.status.code in (0, 1, 2) else StatusCode.UNSET
    return ReadableSpan(
        name=span.name,
        context=SpanContext(
            trace_id, int.from_bytes(span.span_id, "big"), is_remote=False, trace_flags=flags
        ),
        parent=parent,
        resource=resource,
        attributes=parts.attributes,
        events=[Event(name, attributes, time) for name, time, attributes in parts.events],
        kind=SpanKind(span.kind - 1) if 1 <= span.kind <= 5 else SpanKind.INTERNAL,
        status=Status(code, span.status.message or None) if code is StatusCode.ERROR else Status(code),
        start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano,
    )


class RaySpanEvents:
    """Ray task/actor spans -> RayEvents, with the ids a recorder would have stamped.

    The seam to the tracing side: `TaskSpanEvents` holds the span -> event mapping (one instance per
    session, as one per process there); this class adapts OTLP spans to it, gives each event a
    deterministic event id (so a re-sent span gives the same ids and consumers can de-duplicate),
    sets the envelope's node id, and merges one span's events per entity like the recorder does.
    """

    def __init__(self, max_sessions: int = 64) -> None:
        self._max_sessions = max_sessions
        self._mappers: dict[str, TaskSpanEvents] = {}

    def _mapper(self, session: str) -> TaskSpanEvents:
        mapper = self._mappers.get(session)
        if mapper is None:
            if len(self._mappers) >= self._max_sessions:
                self._mappers.pop(next(iter(self._mappers)))
            mapper = self._mappers[session] = TaskSpanEvents(EventFactory(session_name=session))
        return mapper

    def convert(self, span: Span, parts: SpanParts, resource: Resource) -> list[RayEvent]:
        """The span's events ([] for a span that is not a task or actor span); raises
        NotARayEventError for a task span whose ids are unusable."""
        session = str(resource.attributes.get(semconv.RAY_SESSION_NAME, ""))
        view = readable_span(span, parts, resource)
        mapper = self._mapper(session)
        try:
            pieces = [*mapper.started(view), *mapper.ended(view)]
        except UnmappableSpan as exc:
            raise NotARayEventError(f"span {span.name!r}: {exc}") from None
        node = hex_or_empty(view.attributes.get(semconv.RAY_NODE_ID) if view.attributes else None)
        events = [piece.event for piece in pieces]
        for index, event in enumerate(events):
            seed = (
                span.trace_id + span.span_id + index.to_bytes(2, "big") + event.event_type.to_bytes(2, "big")
            )
            event.event_id = hashlib.sha224(seed).digest()  # 28 bytes, like Ray's event ids
            if len(node) == ids.UNIQUE_ID_SIZE:
                event.node_id = node
        return merge_per_entity(events)


def merge_per_entity(events: Iterable[RayEvent]) -> list[RayEvent]:
    """Fold events of the same (entity, type) into the first one, as the recorder does."""
    merged: list[RayEvent] = []
    first: dict[Any, RayEvent] = {}
    for event in events:
        key = entity_key(event)
        if key is None:
            merged.append(event)
            continue
        held = first.get(key)
        if held is None:
            first[key] = event
            merged.append(event)
        else:
            merge_into(held, event)
    return merged
