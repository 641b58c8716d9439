"""Lossless round trip: RayEvent -> our OTel log record -> OTLP -> bridge -> RayEvent JSON == original.

Every event type of the registry, each with EVERY field of its payload set (built from the message
descriptors, so a field added to the protos is covered without editing this test), plus every event
of the real Ray 2.60 captures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.descriptor import FieldDescriptor
from helpers.agg_procs import read_jsonl
from helpers.bridge_capture import run_e_events
from helpers.bridge_procs import ServerGroup, url, wait_until
from helpers.otlp_logs import emit_ray_events
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events.registry import REGISTRY
from ray_otel_events.otel import otlp_json
from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.otel.plain_records import key_values, python_to_any_value
from ray_otel_events.otel.to_ray_events import claims_ray_event, ray_event_from_log_record
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

CAMEL = RayEventJsonEncoder()
SNAKE = RayEventJsonEncoder(preserve_proto_field_name=True)


def _fill(message: Any, depth: int = 0) -> None:
    """Set every field to a non-default value (the first member of each oneof), recursively."""
    chosen_oneofs: set[str] = set()
    for field in message.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        if oneof is not None and not getattr(oneof, "is_synthetic", lambda: False)():
            if oneof.name in chosen_oneofs:
                continue
            chosen_oneofs.add(oneof.name)
        name = field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            target = getattr(message, name)
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                if depth < 4:
                    _fill(target[f"k-{name}"], depth + 1)
            else:
                target[f"k-{name}"] = _scalar(value_field, 1)
        elif field.is_repeated:
            container = getattr(message, name)
            for i in range(2):
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    if depth < 4:
                        _fill(container.add(), depth + 1)
                else:
                    container.append(_scalar(field, i + 1))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            child = getattr(message, name)
            if field.message_type.full_name == "google.protobuf.Timestamp":
                child.FromNanoseconds(1_795_311_449_171_819_058 + depth)
            elif depth < 4:
                _fill(child, depth + 1)
                child.SetInParent()
        else:
            setattr(message, name, _scalar(field, 3))


def _scalar(field: Any, n: int) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return f"{field.name}-{n} ünï"
    if kind == FieldDescriptor.TYPE_BYTES:
        return bytes([n]) * 28 + b"\xff\x00"
    if kind == FieldDescriptor.TYPE_BOOL:
        return True
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 2.5 * n
    if kind == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values[-1].number
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return -(2**62) - n
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return 2**63 + n
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return 2**31 + n
    return -(2**30) - n


def every_type_events() -> list[RayEvent]:
    payload_fields = {spec.payload_field for spec in REGISTRY.values()}
    events = []
    for spec in REGISTRY.values():
        event = RayEvent()
        _fill(event)  # the envelope, and every payload ...
        for name in payload_fields - {spec.payload_field}:
            event.ClearField(name)  # ... of which only the type's own stays
        event.event_type = spec.event_type  # type: ignore[assignment]
        events.append(event)
    return events


def _as_otlp_record(event: RayEvent) -> LogRecord:
    """Our OTel form of an event, as an OTLP log record (what our log exporters send)."""
    fields = to_log_record(event)
    record = LogRecord(time_unix_nano=fields.timestamp_ns, event_name=fields.event_name)
    python_to_any_value(fields.body, record.body)
    record.attributes.extend(key_values(fields.attributes))
    return record


def test_every_event_type_is_covered() -> None:
    events = every_type_events()
    assert len(events) == len(REGISTRY) == 17
    for event in events:
        payload = getattr(event, REGISTRY[event.event_type].payload_field)
        assert len(payload.ListFields()) == len(
            [
                f
                for f in payload.DESCRIPTOR.fields
                if f.containing_oneof is None or f == f.containing_oneof.fields[0]
            ]
        )


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_round_trip_in_process_is_exact(wire: str) -> None:
    events = every_type_events() + run_e_events()
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(_as_otlp_record(e) for e in events)
    if wire == "protobuf":
        received = ExportLogsServiceRequest.FromString(request.SerializeToString())
    else:
        received = otlp_json.logs_request_from_json(orjson.loads(orjson.dumps(otlp_json.to_json(request))))
    records = received.resource_logs[0].scope_logs[0].log_records
    assert len(records) == len(events)
    for event, record in zip(events, records, strict=True):
        assert claims_ray_event(record)
        back = ray_event_from_log_record(record)
        assert back == event
        assert CAMEL.to_dict(back) == CAMEL.to_dict(event)
        assert SNAKE.to_dict(back) == SNAKE.to_dict(event)


def test_round_trip_through_the_bridge_process_with_the_sdk_exporter(tmp_path: Path) -> None:
    events = every_type_events() + run_e_events()
    with ServerGroup(tmp_path) as group:
        sink, sink_path = group.sink("events")
        bridge = group.bridge("--export-addr", url(sink, "/events"), "--otlp-endpoint", url(sink))
        provider = LoggerProvider()
        provider.add_log_record_processor(
            SimpleLogRecordProcessor(OTLPLogExporter(endpoint=url(bridge, "/v1/logs")))
        )
        logger = provider.get_logger("ray_otel_events")
        emit_ray_events(logger, events)
        provider.shutdown()
        received = wait_until(lambda: read_jsonl(sink_path), len(events))
        stats = bridge.stop()
    expected = [CAMEL.to_dict(e) for e in events]
    assert len(received) == len(expected)
    by_id = {e["eventId"]: e for e in received}
    # eventIds repeat only among the synthetic events (all filled alike), so compare as multisets.
    assert sorted(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in received) == sorted(
        orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in expected
    )
    assert by_id  # the sink saw RayEvents and nothing else
    assert stats["bridge"]["ray_events_from_log_records"] == [{"labels": {}, "value": len(events)}]
