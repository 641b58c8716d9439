"""OTLP requests turned into what the store keeps: span dicts, task log lines, and RayEvents.

A log record whose event name says it carries a RayEvent becomes that event (JSON form, as the
aggregator POSTs it), so `/v1/logs` feeds the same state rows as `/v1/ray-events`; but not the
event records of our tracing hooks (`ray_otel_events.producer = task_event_span_processor`): they
are the hook's reading of its own spans, whose task ids it derives (it cannot know Ray's when a
task is submitted), so as state they would be tasks Ray never had, or overrule what Ray's own
events say of an actor. Ray's events are the state; the hook's spans, which say what its records
say, are kept. Those records are only counted. Any other log
record is a log line, tied to a task by its `ray.task_id` attribute or, failing that, by the span
it was written in. Spans keep their ids in hex, their times in ns, and the task they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.otel import semconv
from ray_otel_events.otel.plain_records import (
    SPAN_KINDS,
    STATUS_CODES,
    attributes_of,
    span_parts,
    value_of,
)
from ray_otel_events.otel.to_ray_events import NotARayEventError, claims_ray_event
from ray_otel_events.otel.unknown_type_records import carried_event

_ENCODER = RayEventJsonEncoder()


@dataclass
class LogsIntake:
    ray_events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    hook_events: int = 0  # our hooks' own event records: counted, not state (see the module doc)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def log_line(record: LogRecord, resource: dict[str, Any]) -> dict[str, Any]:
    attrs = attributes_of(record)
    body = value_of(record.body) if record.HasField("body") else ""
    return {
        "ts_ns": record.time_unix_nano or record.observed_time_unix_nano,
        "trace_id": record.trace_id.hex(),
        "span_id": record.span_id.hex(),
        "task_id": _text(attrs.get(semconv.RAY_TASK_ID)).lower() or None,
        "attempt": attrs.get(semconv.RAY_TASK_ATTEMPT),
        "actor_id": _text(attrs.get(semconv.RAY_ACTOR_ID)).lower() or None,
        "job_id": _text(attrs.get(semconv.RAY_JOB_ID)).lower() or None,
        "severity": record.severity_text or str(record.severity_number),
        "stream": _text(attrs.get(semconv.LOG_IOSTREAM)) or "log",
        "pid": attrs.get(semconv.PROCESS_PID) or resource.get(semconv.PROCESS_PID),
        "function": _text(attrs.get(semconv.CODE_FUNCTION) or attrs.get(semconv.CODE_FUNCTION_NAME)),
        "body": body if isinstance(body, str) else str(body),
    }


def _from_our_hook(record: LogRecord) -> bool:
    for attribute in record.attributes:
        if attribute.key == semconv.PRODUCER_ATTR:
            return attribute.value.string_value == semconv.TASK_EVENT_PRODUCER
    return False


def from_logs(request: ExportLogsServiceRequest) -> LogsIntake:
    out = LogsIntake()
    for resource_logs in request.resource_logs:
        resource = attributes_of(resource_logs.resource)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                if claims_ray_event(record) and _from_our_hook(record):
                    out.hook_events += 1
                    continue
                try:
                    carried = carried_event(record)
                except NotARayEventError as exc:
                    out.rejected.append(str(exc))
                    continue
                if carried is None:
                    out.lines.append(log_line(record, resource))
                else:  # a later Ray's type is kept as it came: never a log line
                    out.ray_events.append(carried if isinstance(carried, dict) else _ENCODER.to_dict(carried))
    return out


def span_dict(span: Span, resource: dict[str, Any]) -> dict[str, Any]:
    parts = span_parts(span)
    attrs = parts.attributes
    return {
        "trace_id": parts.trace_id.hex(),
        "span_id": parts.span_id.hex(),
        "parent_span_id": parts.parent_span_id.hex(),
        "task_id": _text(attrs.get(semconv.RAY_TASK_ID)).lower() or None,
        "name": parts.name,
        "kind": SPAN_KINDS[parts.kind] if parts.kind < len(SPAN_KINDS) else str(parts.kind),
        "start_ns": parts.start_time_unix_nano,
        "end_ns": parts.end_time_unix_nano,
        "status": STATUS_CODES[parts.status_code] if parts.status_code < len(STATUS_CODES) else "UNSET",
        "status_message": parts.status_message,
        "service": _text(resource.get("service.name")),
        "attributes": attrs,
        "events": [{"name": name, "ts_ns": time, "attributes": a} for name, time, a in parts.events],
    }


def from_traces(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            spans += [span_dict(span, resource) for span in scope_spans.spans]
    return spans
