"""Ended spans as an OTLP `ExportTraceServiceRequest`, written straight to protobuf bytes.

The SDK's OTLP exporter builds a protobuf object for every span, attribute, value and event
(`encode_spans`) and then serializes them, on the exporter thread of every traced process, where
it competes with the tasks for the GIL: most of the OTLP hook's cost is there. Here the same
message is written from the spans' fields with the writers of `otlp_wire` (compiled where built):
the fields `encode_spans` sets, in field-number order, so the bytes are those of
`encode_spans(spans).SerializeToString()` (tests compare them over random spans), with the
resource's and scope's bytes kept per object.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ray_otel_events.otel import otlp_wire

_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_varint = otlp_wire.varint
_attributes = otlp_wire.attributes

# Span.flags (16, fixed32): the SDK marks that it knows whether the parent is remote, and if it is.
_FLAGS_LOCAL = b"\x85\x01" + _fixed32(0x100)
_FLAGS_REMOTE = b"\x85\x01" + _fixed32(0x300)


_field = otlp_wire.bytes_field


def _text(tag: bytes, value: str | None) -> bytes:
    """A string field, left out when empty (proto3)."""
    return otlp_wire.string_field(tag, value) if value else b""


def _count(tag: bytes, value: int) -> bytes:
    return tag + _varint(value) if value else b""


def _trace_state(state: Any) -> str:
    return ",".join([f"{key}={value}" for key, value in state.items()]) if state is not None else ""


def _plain(attributes: Any) -> Any:
    """A plain dict of the attributes, which the compiled writer takes in one call: a span gives
    them as a read-only proxy of its dict (`copy()` asks the dict), an SDK span as BoundedAttributes."""
    kind = type(attributes)
    return attributes if kind is dict else attributes.copy() if kind is MappingProxyType else dict(attributes)


def _event(event: Any) -> bytes:
    """Span.events entry (11): Event{1 time fixed64, 2 name, 3 attributes, 4 dropped}."""
    attributes = event.attributes
    body = (
        (b"\x09" + _fixed64(event.timestamp) if event.timestamp else b"")
        + _text(b"\x12", event.name)
        + (_attributes(_plain(attributes), b"\x1a") if attributes else b"")
        + _count(b"\x20", event.dropped_attributes)
    )
    return _field(b"\x5a", body)


def _link(link: Any) -> bytes:
    """Span.links entry (13): Link{1 trace id, 2 span id, 4 attributes, 5 dropped, 6 flags}; the
    SDK's encoder leaves the link's trace state out."""
    context = link.context
    body = (
        _field(b"\x0a", context.trace_id.to_bytes(16, "big"))
        + _field(b"\x12", context.span_id.to_bytes(8, "big"))
        + (_attributes(link.attributes, b"\x22") if link.attributes else b"")
        + _count(b"\x28", link.dropped_attributes)
        + b"\x35"
        + _fixed32(0x300 if context.is_remote else 0x100)
    )
    return _field(b"\x6a", body)


def span_wire(span: ReadableSpan) -> bytes:
    """One serialized Span, as the SDK's `_encode_span(span).SerializeToString()`."""
    context = span.get_span_context()
    assert context is not None
    parent = span.parent
    status = span.status
    start, end = span.start_time, span.end_time
    attributes = span.attributes
    events = span.events
    links = span.links
    code = status.status_code.value
    status_body = _text(b"\x12", status.description) + (b"\x18" + _varint(code) if code else b"")
    return b"".join(
        [
            b"\x0a\x10",
            context.trace_id.to_bytes(16, "big"),
            b"\x12\x08",
            context.span_id.to_bytes(8, "big"),
            _text(b"\x1a", _trace_state(context.trace_state)),
            b"\x22\x08" + parent.span_id.to_bytes(8, "big") if parent is not None else b"",
            _text(b"\x2a", span.name),
            b"\x30" + _varint(span.kind.value + 1),  # SDK kinds 0-4 are OTLP's 1-5
            b"\x39" + _fixed64(start) if start else b"",
            b"\x41" + _fixed64(end) if end else b"",
            _attributes(_plain(attributes), otlp_wire.SPAN_ATTRIBUTES) if attributes else b"",
            _count(b"\x50", span.dropped_attributes),
            b"".join([_event(event) for event in events]) if events else b"",
            _count(b"\x60", span.dropped_events),
            b"".join([_link(link) for link in links]) if links else b"",
            _count(b"\x70", span.dropped_links),
            _field(b"\x7a", status_body),
            _FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL,
        ]
    )


_resources: dict[int, tuple[Resource, bytes]] = {}
_scopes: dict[int, tuple[InstrumentationScope | None, bytes]] = {}


def _resource_head(resource: Resource) -> bytes:
    """ResourceSpans.resource (1), kept per Resource object."""
    known = _resources.get(id(resource))
    if known is not None and known[0] is resource:
        return known[1]
    attributes = dict(resource.attributes)
    head = _field(b"\x0a", _attributes(attributes, b"\x0a") if attributes else b"")
    if len(_resources) >= 64:  # one or two per process: a bound for safety only
        _resources.clear()
    _resources[id(resource)] = (resource, head)
    return head


def _scope_head(scope: InstrumentationScope | None) -> bytes:
    """ScopeSpans.scope (1), kept per scope object."""
    known = _scopes.get(id(scope))
    if known is not None and known[0] is scope:
        return known[1]
    body = b""
    if scope is not None:
        attributes = dict(scope.attributes) if scope.attributes else None
        body = (
            _text(b"\x0a", scope.name)
            + _text(b"\x12", scope.version)
            + (_attributes(attributes, b"\x1a") if attributes else b"")
        )
    head = _field(b"\x0a", body)
    if len(_scopes) >= 256:
        _scopes.clear()
    _scopes[id(scope)] = (scope, head)
    return head


def spans_request(spans: Sequence[ReadableSpan]) -> bytes:
    """`encode_spans(spans).SerializeToString()`: spans grouped by resource, then by scope, each
    group in the order its first span came, as the SDK groups them (by equality: a Resource's hash
    dumps its attributes to JSON, so each resource object is hashed once a batch)."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
    by_object: dict[int, dict[InstrumentationScope | None, list[bytes]]] = {}
    for span in spans:
        resource = span.resource
        by_scope = by_object.get(id(resource))
        if by_scope is None:
            by_scope = groups.get(resource)
            if by_scope is None:
                by_scope = groups[resource] = {}
            by_object[id(resource)] = by_scope  # the spans keep their resources alive meanwhile
        scope = span.instrumentation_scope or None
        encoded = by_scope.get(scope)
        if encoded is None:
            encoded = by_scope[scope] = []
        encoded.append(_field(b"\x12", span_wire(span)))
    return b"".join([resource_spans(resource, by_scope) for resource, by_scope in groups.items()])


def resource_spans(resource: Resource, by_scope: dict[InstrumentationScope | None, list[bytes]]) -> bytes:
    """One ResourceSpans entry of a request: the resource's spans, already written as
    `ScopeSpans.spans` entries (`span_field`), grouped by scope in the order given; framed where
    the parts are, so that the entry is copied once, by one join."""
    parts = [b"", _resource_head(resource)]
    size = len(parts[1])
    for scope, encoded in by_scope.items():
        head = _scope_head(scope)
        tail = _text(b"\x1a", scope.schema_url if scope else None)
        entry = len(head) + sum(map(len, encoded)) + len(tail)
        frame = b"\x12" + _varint(entry)
        parts += (frame, head, *encoded, tail)
        size += len(frame) + entry
    tail = _text(b"\x1a", resource.schema_url)
    parts.append(tail)
    parts[0] = b"\x0a" + _varint(size + len(tail))
    return b"".join(parts)


def span_field(span_bytes: bytes) -> bytes:
    """A serialized Span as a `ScopeSpans.spans` entry."""
    return _field(b"\x12", span_bytes)


def plain_span_wire(
    trace_id: bytes,
    span_id: bytes,
    parent_id: int,
    parent_remote: bool,
    name: str,
    kind: int,
    start: int,
    end: int,
    attributes: dict[str, Any],
    dropped_attributes: int,
    dropped_events: int,
    dropped_links: int,
    ok: bool,
) -> bytes:
    """`span_wire` of a span with no trace state, events or links and an UNSET (or OK) status,
    from its fields (`kind` the SDK's 0-4; `parent_id` 0 for none): what the spool's forwarder
    writes for most lines without making a span."""
    return b"".join(
        [
            b"\x0a\x10",
            trace_id,
            b"\x12\x08",
            span_id,
            b"\x22\x08" + parent_id.to_bytes(8, "big") if parent_id else b"",
            _text(b"\x2a", name),
            b"\x30" + _varint(kind + 1),
            b"\x39" + _fixed64(start) if start else b"",
            b"\x41" + _fixed64(end) if end else b"",
            _attributes(attributes, otlp_wire.SPAN_ATTRIBUTES) if attributes else b"",
            _count(b"\x50", dropped_attributes),
            _count(b"\x60", dropped_events),
            _count(b"\x70", dropped_links),
            b"\x7a\x02\x18\x01" if ok else b"\x7a\x00",
            _FLAGS_REMOTE if parent_id and parent_remote else _FLAGS_LOCAL,
        ]
    )
