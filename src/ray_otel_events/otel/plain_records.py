"""OTLP spans and log records as plain JSON records, for consumers that do not speak OTLP.

One flat object per span or log record, carrying its resource and scope with it, so a consumer
needs no nesting or OTLP knowledge: hex ids, attributes as a plain JSON object, enums by name,
times as integer nanoseconds since the epoch. The format is documented in docs/bridge.md.
"""

from __future__ import annotations

import base64
import functools
from typing import Any, NamedTuple

import orjson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span

from ray_otel_events import native

SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_CODES = ("UNSET", "OK", "ERROR")


def any_value_to_python(value: AnyValue) -> Any:
    """An AnyValue as the JSON value it stands for (bytes as base64 text, empty as None)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    if kind == "array_value":
        return [any_value_to_python(v) for v in value.array_value.values]
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def attributes_to_dict(attributes: Any) -> dict[str, Any]:
    """A repeated KeyValue (attributes, a kvlist's values) as a plain object (a repeated key keeps
    its last value)."""
    out: dict[str, Any] = {}
    for kv in attributes:
        value = kv.value
        # Most attributes are strings: one call to the message instead of two, and no recursion.
        if value.WhichOneof("value") == "string_value":
            out[kv.key] = value.string_value
        else:
            out[kv.key] = any_value_to_python(value)
    return out


try:  # built by setup.py where a C compiler is present
    from ray_otel_events.native import _any_value_wire
except ImportError:
    _any_value_wire = None  # type: ignore[assignment]
# AnyValue's members by field number, as native/any_value.h names them (A_STRING...): the two
# modules that read AnyValues export theirs, checked against these at import.
ANY_VALUE_MEMBERS = {
    f"A_{name.upper()}": AnyValue.DESCRIPTOR.fields_by_name[f"{name}_value"].number
    for name in ("string", "bool", "int", "double", "array", "kvlist", "bytes")
}
_compiled = _any_value_wire is not None and native.ENABLED
if _compiled:
    native.check_numbers(_any_value_wire, ANY_VALUE_MEMBERS)
try:
    from ray_otel_events.native import _span_records
except ImportError:
    _span_records = None  # type: ignore[assignment]
_records_compiled = _span_records is not None and native.ENABLED
if _records_compiled:
    _span_records.bind(
        orjson.dumps, tuple(map(orjson.dumps, SPAN_KINDS)), tuple(map(orjson.dumps, STATUS_CODES))
    )
_field_numbers: dict[tuple[type, str], int] = {}


def value_of(value: AnyValue) -> Any:
    """`any_value_to_python`, read from the value's wire bytes where compiled: one upb call, not
    four per value."""
    if not _compiled:
        return any_value_to_python(value)
    return _any_value_wire.any_value(value.SerializeToString())


def attributes_of(message: Any, field: str = "attributes") -> dict[str, Any]:
    """`attributes_to_dict` of a message's repeated KeyValue `field`, read the same way."""
    if not _compiled:
        return attributes_to_dict(getattr(message, field))
    key = (type(message), field)
    number = _field_numbers.get(key)
    if number is None:
        number = _field_numbers[key] = message.DESCRIPTOR.fields_by_name[field].number
    return _any_value_wire.key_values(message.SerializeToString(), number)


def python_to_any_value(value: Any, out: AnyValue | None = None) -> AnyValue:
    """The inverse for JSON-like values: dict -> kvlist, list -> array, bool before int."""
    target = AnyValue() if out is None else out
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, dict):
        kvlist = target.kvlist_value
        kvlist.SetInParent()
        for key, item in value.items():
            python_to_any_value(item, kvlist.values.add(key=key).value)
    elif isinstance(value, (list, tuple)):
        array = target.array_value
        array.SetInParent()
        for item in value:
            python_to_any_value(item, array.values.add())
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif value is not None:
        raise TypeError(f"cannot represent {type(value).__name__} as an OTLP AnyValue")
    return target


def key_values(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=python_to_any_value(value)) for key, value in attributes.items()]


class RecordContext:
    """The resource and scope of one ScopeSpans/ScopeLogs, converted once for all its items."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self.resource = attributes_of(resource)
        self.scope: dict[str, Any] = {"name": scope.name, "version": scope.version}
        if len(scope.attributes):
            self.scope["attributes"] = attributes_of(scope)

    @functools.cached_property
    def json_tail(self) -> bytes:
        """How a JSON record ends: `,"resource":...,"scope":...}`."""
        return b"," + orjson.dumps({"resource": self.resource, "scope": self.scope})[1:]


class SpanParts(NamedTuple):
    """What a plain span record is made of, read once from the span."""

    trace_id: bytes
    span_id: bytes
    trace_state: str
    parent_span_id: bytes
    name: str
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]  # (name, time_unix_nano, attributes)
    links: list[tuple[bytes, bytes, str, dict[str, Any]]]  # (trace_id, span_id, trace_state, attributes)
    status_code: int
    status_message: str


_new_parts = functools.partial(tuple.__new__, SpanParts)


def span_parts(span: Span) -> SpanParts:
    """The span's parts: read from its wire bytes in one call where compiled."""
    if _compiled:
        return _new_parts(_any_value_wire.span_parts(span.SerializeToString()))
    status = span.status
    return SpanParts(
        span.trace_id,
        span.span_id,
        span.trace_state,
        span.parent_span_id,
        span.name,
        span.kind,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        attributes_to_dict(span.attributes),
        [(e.name, e.time_unix_nano, attributes_to_dict(e.attributes)) for e in span.events],
        [(k.trace_id, k.span_id, k.trace_state, attributes_to_dict(k.attributes)) for k in span.links],
        status.code,
        status.message,
    )


def span_record(span: SpanParts, context: RecordContext) -> dict[str, Any]:
    kind, code = span.kind, span.status_code
    return {
        "signal": "span",
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
        "traceState": span.trace_state,
        "name": span.name,
        "kind": SPAN_KINDS[kind] if 0 <= kind < len(SPAN_KINDS) else str(kind),
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
        "status": {
            "code": STATUS_CODES[code] if 0 <= code < len(STATUS_CODES) else str(code),
            "message": span.status_message,
        },
        "attributes": span.attributes,
        "events": [
            {"name": name, "timeUnixNano": time, "attributes": attributes}
            for name, time, attributes in span.events
        ],
        "links": [
            {
                "traceId": trace_id.hex(),
                "spanId": span_id.hex(),
                "traceState": state,
                "attributes": attributes,
            }
            for trace_id, span_id, state, attributes in span.links
        ],
        "resource": context.resource,
        "scope": context.scope,
    }


def span_records_json(scope_spans: ScopeSpans, context: RecordContext) -> list[bytes | None]:
    """Each span's record as JSON, `orjson.dumps(span_record(span_parts(span), context))`, written from
    the wire bytes in one call where compiled (no dicts made); None in the place of a span the caller
    reads itself: one with a `ray.*` attribute (it may stand for a RayEvent), one with anything the
    compiled writer leaves to Python, and every span where it is not built."""
    if not _records_compiled:
        return [None] * len(scope_spans.spans)
    return _span_records.records(scope_spans.SerializeToString(), context.json_tail)


def log_record(record: LogRecord, context: RecordContext) -> dict[str, Any]:
    return {
        "signal": "log",
        "timeUnixNano": record.time_unix_nano,
        "observedTimeUnixNano": record.observed_time_unix_nano,
        "severityNumber": int(record.severity_number),
        "severityText": record.severity_text,
        "eventName": record.event_name,
        "body": value_of(record.body) if record.HasField("body") else None,
        "attributes": attributes_of(record),
        "traceId": record.trace_id.hex(),
        "spanId": record.span_id.hex(),
        "flags": record.flags,
        "resource": context.resource,
        "scope": context.scope,
    }
