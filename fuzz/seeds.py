"""Seeds made at run time from the real captures in tests/fixtures (no corpus is committed):
Ray 2.60's POST bodies and events, and what our own writers make of them (RayEvent wire bytes,
forwarded pieces, OTLP log and span requests)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.encoding.ray_json_decode import decode_event
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.test_otlp_wire import _fixture_dicts

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def posted_bodies() -> Iterator[bytes]:
    """Every captured POST body as Ray sent it, and each event posted alone."""
    for pattern in ("bridge/runE/*.body", "ray-2.60/raw/*.body.json", "ray-2.60/raw/runE/*.body"):
        for path in sorted(FIXTURES.glob(pattern)):
            yield path.read_bytes()
    for item in event_dicts():
        yield orjson.dumps([item])


def event_dicts() -> list[dict[str, Any]]:
    """Every captured RayEvent as posted (camelCase JSON objects)."""
    return _fixture_dicts()


def events() -> list[RayEvent]:
    return [decode_event(item, ignore_unknown_fields=True) for item in event_dicts()]


def _converted() -> tuple[list[bytes], list[bytes]]:
    """The OTLP spans and log records (wire bytes) the bridge's converter makes of the events."""
    from ray_otel_events.otel.from_ray_events import RayEventsToOtel

    converter = RayEventsToOtel()
    out = converter.add(events())
    spans = [span.item for span in out.spans + converter.flush().spans]
    return spans, [record.item for record in out.logs]


def _resource() -> Any:
    from ray_otel_events.otel.plain_records import key_values

    resource = Resource()
    resource.attributes.extend(key_values({"service.name": "ray", "ray.session_name": "s", "n": 1}))
    return resource


def traces_requests() -> list[ExportTraceServiceRequest]:
    """The converter's spans, a few a request, under one resource and scope."""
    spans, _ = _converted()
    requests = []
    for start in range(0, len(spans), 3):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add(resource=_resource())
        scope_spans = resource_spans.scope_spans.add(scope=InstrumentationScope(name="ray_otel_events"))
        scope_spans.spans.extend(Span.FromString(item) for item in spans[start : start + 3])
        requests.append(request)
    return requests


def logs_requests() -> list[ExportLogsServiceRequest]:
    """The converter's log records, a few a request, under one resource and scope."""
    _, records = _converted()
    requests = []
    for start in range(0, len(records), 3):
        request = ExportLogsServiceRequest()
        resource_logs = request.resource_logs.add(resource=_resource())
        scope_logs = resource_logs.scope_logs.add(scope=InstrumentationScope(name="ray_otel_events"))
        scope_logs.log_records.extend(LogRecord.FromString(item) for item in records[start : start + 3])
        requests.append(request)
    return requests


def as_json(message: Any) -> bytes:
    """OTLP/JSON of a request (the spec's camelCase, ids in hex)."""
    from google.protobuf import json_format

    obj = json_format.MessageToDict(message)
    _hex_ids(obj)
    return orjson.dumps(obj)


def _hex_ids(obj: Any) -> None:
    """OTLP/JSON writes trace and span ids in hex where protobuf's JSON writes base64."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                obj[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(obj, list):
        for value in obj:
            _hex_ids(value)
