"""Events of a type our protos cannot name (a later Ray's, posted by name) through OTLP, as posted.

Such an event cannot become a RayEvent message, so the bridge carries it as the object it was
posted as: a log record whose event name is `ray.<type in lower case>` (as every RayEvent's record
is named) and whose body is that object, key for key and value for value; read back, the record
gives the same object, which the bridge posts as it came. (A type given by a number our protos
lack is a RayEvent message, and travels as one: `to_ray_events`.)
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from ray_otel_events.encoding.newer_releases import type_of, unknown_type
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.plain_records import value_of
from ray_otel_events.otel.to_ray_events import (
    NotARayEventError,
    claims_ray_event,
    event_name_of,
    ray_event_from_log_record,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent


def log_record(event: dict[str, Any], observed_time_unix_nano: int) -> LogRecord:
    """The record carrying a posted event of unknown type (`posted_event` reads it back)."""
    name = unknown_type(type_of(event))
    if name is None:
        raise ValueError("not an event of a type our protos cannot name")
    body = AnyValue.FromString(otlp_wire.any_value(event))
    severity = event.get("severity")
    return LogRecord(
        event_name=semconv.event_name_for(name),
        observed_time_unix_nano=observed_time_unix_nano,
        severity_text=severity if isinstance(severity, str) else "",
        body=body,
    )


def posted_event(record: LogRecord) -> dict[str, Any] | None:
    """The posted object a record carries when it is `log_record`'s (its body an object whose
    type our protos cannot name, the record named after that type); None for any other record."""
    event_name = event_name_of(record)
    if (
        not event_name.startswith(semconv.EVENT_NAME_PREFIX)
        or record.body.WhichOneof("value") != "kvlist_value"
    ):
        return None
    event = value_of(record.body)
    name = unknown_type(type_of(event))
    if name is None or semconv.event_name_for(name) != event_name:
        return None
    return event if isinstance(event, dict) else None


def carried_event(record: LogRecord) -> RayEvent | dict[str, Any] | None:
    """What a record carries: its RayEvent (`ray_event_from_log_record`), or, for a type our
    protos cannot name (by name, or by number with fields they lack), the object it was posted
    as; None for a record that carries neither (other telemetry). NotARayEventError for a record
    that claims a RayEvent and holds none."""
    if not claims_ray_event(record):
        return posted_event(record)
    try:
        return ray_event_from_log_record(record)
    except NotARayEventError:
        posted = posted_event(record)
        if posted is None:
            raise
        return posted
