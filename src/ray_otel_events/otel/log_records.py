"""Every RayEvent as an OpenTelemetry log record, and back.

The record's body is the whole event exactly as the aggregator posts it (protobuf JSON mapping), so
a receiver rebuilds the RayEvent without loss; its attributes repeat the event's fields flattened
to dotted paths (for querying in a backend that does not index bodies) plus the entity ids in the
hex form Ray's tracing uses, so records join with spans.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events.registry import REGISTRY, event_type_name
from ray_otel_events.otel import semconv
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]

# RayEvent.Severity -> OTel SeverityNumber (the lowest number of each range, as the data model asks).
SEVERITY_NUMBER: dict[int, int] = {
    RayEvent.Severity.EVENT_SEVERITY_UNSPECIFIED: 0,
    RayEvent.Severity.TRACE: 1,
    RayEvent.Severity.DEBUG: 5,
    RayEvent.Severity.INFO: 9,
    RayEvent.Severity.WARNING: 13,
    RayEvent.Severity.ERROR: 17,
    RayEvent.Severity.FATAL: 21,
}

_ATTRIBUTE_PREFIX = "ray.event."

# Payload id fields -> Ray's tracing attribute names (hex).
_ID_ATTRIBUTES = {
    "task_id": semconv.RAY_TASK_ID,
    "job_id": semconv.RAY_JOB_ID,
    "actor_id": semconv.RAY_ACTOR_ID,
    "node_id": semconv.RAY_NODE_ID,
    "worker_id": semconv.RAY_WORKER_ID,
    "parent_task_id": semconv.RAY_PARENT_TASK_ID,
    "placement_group_id": semconv.RAY_PLACEMENT_GROUP_ID,
}

_camel = RayEventJsonEncoder()
_proto_names = RayEventJsonEncoder(preserve_proto_field_name=True)


@dataclass(frozen=True)
class LogRecordFields:
    """What any OTel logs API or OTLP encoder needs to emit one RayEvent as a record."""

    event_name: str
    timestamp_ns: int
    severity_number: int
    severity_text: str
    body: dict[str, Any]
    attributes: dict[str, AttributeValue]


def entity_attributes(event: RayEvent) -> dict[str, AttributeValue]:
    """Entity ids in Ray's hex attribute names, plus attempt, type and session."""
    attrs: dict[str, AttributeValue] = {
        semconv.RAY_EVENT_TYPE: event_type_name(event.event_type),
        semconv.RAY_SESSION_NAME: event.session_name,
    }
    spec = REGISTRY.get(event.event_type)
    if spec is None:
        return attrs
    payload = getattr(event, spec.payload_field)
    for field, attr in _ID_ATTRIBUTES.items():
        value = getattr(payload, field, b"")
        if isinstance(value, bytes) and value:
            attrs[attr] = value.hex()
    for field in ("task_attempt", "attempt_number"):
        if hasattr(payload, field):
            attrs[semconv.RAY_TASK_ATTEMPT] = int(getattr(payload, field))
    if hasattr(payload, "submission_id") and payload.submission_id:
        attrs[semconv.RAY_SUBMISSION_ID] = payload.submission_id
    if event.node_id and semconv.RAY_NODE_ID not in attrs:
        attrs[semconv.RAY_NODE_ID] = event.node_id.hex()
    return attrs


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, AttributeValue]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}", item)
    elif isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            yield prefix, list(value)
        else:
            for index, item in enumerate(value):
                yield from _flatten(f"{prefix}.{index}", item)
    elif isinstance(value, (str, bool, int, float)):
        yield prefix, value


def to_log_record(event: RayEvent) -> LogRecordFields:
    body = _camel.to_dict(event)
    attributes: dict[str, AttributeValue] = {}
    for key, value in _proto_names.to_dict(event).items():
        attributes.update(_flatten(_ATTRIBUTE_PREFIX + key, value))
    attributes.update(entity_attributes(event))
    severity = SEVERITY_NUMBER.get(event.severity, 0)
    return LogRecordFields(
        event_name=semconv.event_name_for(event_type_name(event.event_type)),
        timestamp_ns=event.timestamp.ToNanoseconds(),
        severity_number=severity,
        severity_text=RayEvent.Severity.Name(event.severity) if severity else "",
        body=body,
        attributes=attributes,
    )


def from_log_body(body: Mapping[str, Any]) -> RayEvent:
    """Rebuild the RayEvent from a record body (camelCase or proto field names both accepted)."""
    event = RayEvent()
    json_format.ParseDict(dict(body), event)
    return event
