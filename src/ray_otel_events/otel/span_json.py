"""Spans and log records as the SDK's own JSON lines, without the SDK's per-item resource round trip.

Ray's bundled hook writes `ReadableSpan.to_json(indent=None)` per line, and tools that read its
files expect exactly that form. The SDK method re-serialises and re-parses the resource for every
span (`json.loads(resource.to_json())`), which is most of its cost; here the resource dict is
cached per Resource object and the rest is built the same way, so the output is byte-identical
(tests compare against the SDK method) at a fraction of the cost.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, format_span_id, format_trace_id

_UTC = datetime.UTC
_resource_cache: dict[int, tuple[Resource, str]] = {}
_cache_lock = threading.Lock()


def _resource_json(resource: Resource) -> str:
    """`json.dumps(json.loads(resource.to_json()))`, computed once per Resource object."""
    cached = _resource_cache.get(id(resource))
    if cached is not None and cached[0] is resource:
        return cached[1]
    text = json.dumps(json.loads(resource.to_json()))
    entry = (resource, text)
    with _cache_lock:
        if len(_resource_cache) > 64:  # resources are per provider: a handful per process
            _resource_cache.clear()
        _resource_cache[id(resource)] = entry
    return text


def ns_to_iso_str(nanoseconds: int) -> str:
    """The SDK's `ns_to_iso_str` (same float rounding), via the faster isoformat."""
    return (
        datetime.datetime.fromtimestamp(nanoseconds / 1e9, tz=_UTC).isoformat(timespec="microseconds")[:-6]
        + "Z"
    )


def _context(ctx: SpanContext) -> dict[str, str]:
    return {
        "trace_id": f"0x{format_trace_id(ctx.trace_id)}",
        "span_id": f"0x{format_span_id(ctx.span_id)}",
        "trace_state": repr(ctx.trace_state),
    }


def _attrs(attributes: Any) -> Any:
    if attributes is not None and not isinstance(attributes, dict):
        return dict(attributes)
    return attributes


def _span_fields(span: ReadableSpan) -> dict[str, Any]:
    status = {"status_code": span.status.status_code.name}
    if span.status.description:
        status["description"] = span.status.description
    parent = span.parent
    return {
        "name": span.name,
        "context": _context(span.context) if span.context else None,
        "kind": str(span.kind),
        "parent_id": None if parent is None else f"0x{format_span_id(parent.span_id)}",
        "start_time": ns_to_iso_str(span.start_time) if span.start_time else None,
        "end_time": ns_to_iso_str(span.end_time) if span.end_time else None,
        "status": status,
        "attributes": _attrs(span.attributes),
        "events": [
            {"name": e.name, "timestamp": ns_to_iso_str(e.timestamp), "attributes": _attrs(e.attributes)}
            for e in span.events
        ],
        "links": [
            {"context": _context(link.context), "attributes": _attrs(link.attributes)} for link in span.links
        ],
    }


def span_to_json_line(span: ReadableSpan) -> str:
    """Exactly `span.to_json(indent=None)`, without the trailing newline.

    The resource comes last in the SDK's key order, so its cached JSON text is spliced in.
    """
    head = json.dumps(_span_fields(span))
    return f'{head[:-1]}, "resource": {_resource_json(span.resource)}}}'


class _BytesEncoder(json.JSONEncoder):
    """The SDK's log JSON encoder: bytes as base64."""

    def default(self, o: Any) -> Any:
        if isinstance(o, bytes):
            return base64.b64encode(o).decode()
        return super().default(o)


def log_record_to_json_line(record: Any) -> str:
    """Exactly `ReadableLogRecord.to_json(indent=None)` for a Readable or ReadWrite log record."""
    log = record.log_record
    head = json.dumps(
        {
            "body": log.body,
            "severity_number": log.severity_number.value if log.severity_number is not None else None,
            "severity_text": log.severity_text,
            "attributes": dict(log.attributes) if log.attributes else None,
            "dropped_attributes": record.dropped_attributes,
            "timestamp": ns_to_iso_str(log.timestamp) if log.timestamp is not None else None,
            "observed_timestamp": ns_to_iso_str(log.observed_timestamp),
            "trace_id": f"0x{format_trace_id(log.trace_id)}" if log.trace_id is not None else "",
            "span_id": f"0x{format_span_id(log.span_id)}" if log.span_id is not None else "",
            "trace_flags": log.trace_flags,
        },
        cls=_BytesEncoder,
    )
    tail = json.dumps({"event_name": log.event_name if log.event_name else ""})
    return f'{head[:-1]}, "resource": {_resource_json(record.resource)}, {tail[1:]}'
