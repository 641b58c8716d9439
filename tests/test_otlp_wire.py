"""otel/otlp_wire.py writes the same OTLP messages the generated classes would build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from ray_otel_events.encoding.ray_json_posts import (
    PostedEvent,
    parse_each,
    parse_posted_event,
    parse_posted_events,
)
from ray_otel_events.exporters.otlp import OtlpItemEncoder
from ray_otel_events.otel import otlp_wire
from ray_otel_events.otel.log_records import log_record_wire, to_log_record
from ray_otel_events.otel.plain_records import (
    any_value_to_python,
    attributes_to_dict,
    key_values,
    python_to_any_value,
)
from ray_otel_events.otel.to_ray_events import ray_event_from_log_record
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

FIXTURES = Path(__file__).parent / "fixtures"

scalars = (
    st.text()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.binary()
    | st.none()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def test_varints_at_the_table_edges_match_protobuf() -> None:
    for value in (0, 1, 127, 128, 16383, 16384, 2**63 - 1, -1, -(2**63)):
        assert otlp_wire.any_value(value) == AnyValue(int_value=value).SerializeToString(), value


@given(values)
def test_any_value_decodes_to_what_python_to_any_value_builds(value: Any) -> None:
    assert AnyValue.FromString(otlp_wire.any_value(value)) == python_to_any_value(value)


@given(st.dictionaries(st.text(), values, max_size=6), values)
def test_log_record_decodes_to_the_message(attrs: dict[str, Any], body: Any) -> None:
    wire = otlp_wire.log_record(
        time_unix_nano=1_700_000_000_123_456_789,
        observed_time_unix_nano=1_700_000_001_000_000_000,
        severity_number=9,
        severity_text="INFO",
        event_name="ray.TASK_LIFECYCLE_EVENT",
        body=body,
        attrs=attrs,
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
    )
    expected = LogRecord(
        time_unix_nano=1_700_000_000_123_456_789,
        observed_time_unix_nano=1_700_000_001_000_000_000,
        severity_number=9,  # type: ignore[arg-type]
        severity_text="INFO",
        event_name="ray.TASK_LIFECYCLE_EVENT",
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
    )
    python_to_any_value(body, expected.body)
    expected.attributes.extend(key_values(attrs))
    assert LogRecord.FromString(wire) == expected


def test_logs_request_wraps_records_under_one_resource_and_scope() -> None:
    records = [
        otlp_wire.log_record(
            time_unix_nano=5 + i,
            observed_time_unix_nano=0,
            severity_number=0,
            severity_text="",
            event_name="e",
            body=f"b{i}",
            attrs={"k": i},
        )
        for i in range(3)
    ]
    resource = otlp_wire.attributes({"service.name": "svc"}, b"\x0a")
    scope = otlp_wire.string_field(b"\x0a", "s")
    request = ExportLogsServiceRequest.FromString(otlp_wire.logs_request(resource, scope, records))
    (item,) = request.resource_logs
    assert item.resource.attributes[0].key == "service.name"
    assert item.resource.attributes[0].value.string_value == "svc"
    (scope_logs,) = item.scope_logs
    assert scope_logs.scope.name == "s"
    assert [r.body.string_value for r in scope_logs.log_records] == ["b0", "b1", "b2"]
    assert [r.attributes[0].value.int_value for r in scope_logs.log_records] == [0, 1, 2]
    assert (
        ResourceLogs.FromString(otlp_wire.resource_logs(b"", scope, records[:1])).scope_logs[0].scope.name
        == "s"
    )


def _fixture_dicts() -> list[dict[str, Any]]:
    """Every real RayEvent we hold, as posted: runE's POSTs, the aggregator capture, one per type."""
    dicts: list[dict[str, Any]] = []
    for path in sorted((FIXTURES / "bridge" / "runE").glob("*.body")):
        dicts.extend(orjson.loads(path.read_bytes()))
    captured = orjson.loads((FIXTURES / "aggregator-ray-2.60" / "events.json").read_bytes())
    dicts.extend(item.get("event", item) for item in captured)
    for path in sorted((FIXTURES / "ray-2.60").glob("*.json")):
        dicts.extend(item["event"] for item in orjson.loads(path.read_bytes()))
    return dicts


def _fixture_events() -> list[RayEvent]:
    return [json_format.ParseDict(d, RayEvent(), ignore_unknown_fields=True) for d in _fixture_dicts()]


def _expected_wire(event: RayEvent) -> bytes:
    fields = to_log_record(event)
    return otlp_wire.log_record(
        time_unix_nano=fields.timestamp_ns,
        observed_time_unix_nano=7,
        severity_number=fields.severity_number,
        severity_text=fields.severity_text,
        event_name=fields.event_name,
        body=fields.body,
        attrs=fields.attributes,
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
    )


def test_a_ray_events_record_in_one_pass_equals_the_fields_encoded() -> None:
    events = _fixture_events()
    assert len(events) > 150
    for event in events:
        got = log_record_wire(event, b"\x01" * 16, b"\x02" * 8, 7)
        expected = _expected_wire(event)
        assert LogRecord.FromString(got) == LogRecord.FromString(expected)
        assert got == expected  # byte for byte: the same fields in the same order


def test_records_stay_exact_when_a_fields_values_never_repeat() -> None:
    """Per-field value caches stop caching a field past 1,024 distinct values; records must not
    notice, neither for that field nor for the fields still cached."""
    definition = next(e for e in _fixture_events() if e.HasField("task_definition_event"))
    names = [f"task_{i}" for i in range(1_100)] + ["task_3", "task_1099"]
    for name in names:
        event = RayEvent()
        event.CopyFrom(definition)
        event.task_definition_event.task_name = name
        event.task_definition_event.task_id = name.encode().ljust(24, b"\0")
        assert log_record_wire(event, b"\x01" * 16, b"\x02" * 8, 7) == _expected_wire(event), name


def _span_item(service: str, scope: str, name: str, schema: str = "") -> bytes:
    item = ResourceSpans(schema_url=schema)
    item.resource.attributes.add(key="service.name").value.string_value = service
    scoped = item.scope_spans.add(schema_url=schema)
    scoped.scope.name = scope
    scoped.spans.add(name=name, trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    return item.SerializeToString()


def test_merged_envelopes_group_by_resource_and_scope_in_queue_order() -> None:
    items = [
        _span_item("a", "s1", "1"),
        _span_item("b", "s1", "2"),
        _span_item("a", "s2", "3"),
        _span_item("a", "s1", "4"),
        _span_item("a", "s1", "5", schema="https://opentelemetry.io/schemas/1.30.0"),
    ]
    request = ExportTraceServiceRequest.FromString(otlp_wire.merge_envelopes(items))
    grouped = [
        (
            rs.resource.attributes[0].value.string_value,
            rs.schema_url,
            [(ss.scope.name, ss.schema_url, [span.name for span in ss.spans]) for ss in rs.scope_spans],
        )
        for rs in request.resource_spans
    ]
    schema = "https://opentelemetry.io/schemas/1.30.0"
    assert grouped == [
        ("a", "", [("s1", "", ["1", "4"]), ("s2", "", ["3"])]),
        ("b", "", [("s1", "", ["2"])]),
        ("a", schema, [("s1", schema, ["5"])]),
    ]
    # Every span's bytes are carried as they were queued.
    assert (
        request.resource_spans[0].scope_spans[0].spans[1]
        == ResourceSpans.FromString(items[3]).scope_spans[0].spans[0]
    )


def test_merging_log_envelopes_gives_the_request_one_envelope_holds() -> None:
    resource, scope = b"\x0a\x05\x0a\x01k\x12\x00", b"\x0a\x02me"
    records = [
        otlp_wire.log_record(
            time_unix_nano=n,
            observed_time_unix_nano=n,
            severity_number=9,
            severity_text="INFO",
            event_name="e",
            body={"n": n},
            attrs={"i": n},
        )
        for n in range(1, 4)
    ]
    items = [otlp_wire.resource_logs(resource, scope, [record]) for record in records]
    assert otlp_wire.merge_envelopes(items) == otlp_wire.logs_request(resource, scope, records)
    assert otlp_wire.merge_envelopes([]) == b""


def test_a_malformed_envelope_is_a_value_error_not_a_crash() -> None:
    good = _span_item("a", "s", "x")
    for bad in (good[:-3], b"\x08\x01", b"\x0a\xff"):
        with pytest.raises(ValueError):
            otlp_wire.merge_envelopes([good, bad])


def test_span_events_written_as_bytes_equal_the_messages() -> None:
    attrs = {"exception.type": "ValueError", "exception.message": "", "n": 3}
    expected = Span()
    expected.attributes.extend(key_values({"a": "b"}))
    expected.events.add(time_unix_nano=2**63 + 5, name="exception").attributes.extend(key_values(attrs))
    expected.events.add(time_unix_nano=0, name="RUNNING")
    got = Span()
    got.MergeFromString(
        otlp_wire.attributes({"a": "b"}, otlp_wire.SPAN_ATTRIBUTES)
        + otlp_wire.span_event(2**63 + 5, otlp_wire.span_event_fields("exception", attrs))
        + otlp_wire.span_event(0, otlp_wire.span_event_fields("RUNNING", {}))
    )
    assert got == expected


def _record_unordered(wire: bytes) -> tuple[Any, ...]:
    record = LogRecord.FromString(wire)
    attrs = attributes_to_dict(record.attributes)  # kvlists as dicts: key order does not count
    assert len(attrs) == len(record.attributes)
    body = any_value_to_python(record.body)
    record.ClearField("attributes")
    record.ClearField("body")
    return record.SerializeToString(), body, attrs


def test_a_record_written_from_the_posted_json_equals_the_one_from_the_event() -> None:
    """What Ray's aggregator posts is its events' own JSON: the body written from the posted object
    (no second encoding) is the record written from the decoded event: byte for byte for the
    aggregator's POSTs, and the same record whatever order an object's keys come in."""
    exact = 0
    for item in _fixture_dicts():
        posted = parse_posted_event(item)
        assert posted.json is item  # every real event is read whole by the fast path
        expected = log_record_wire(posted.event, b"\x01" * 16, b"\x02" * 8, 7)
        got = log_record_wire(posted.event, b"\x01" * 16, b"\x02" * 8, 7, posted=posted.json)
        assert _record_unordered(got) == _record_unordered(expected)
        exact += got == expected
    assert exact >= 140  # all but the one-per-type fixtures, stored with their keys sorted


def test_posted_json_with_unknown_fields_is_not_a_body_and_other_spellings_round_trip() -> None:
    """A body must parse back as the event: an object holding a field this schema does not know
    (a newer Ray's) is not used as one; proto field names and numbers for strings are, and give
    the same event back."""
    definition = next(d for d in _fixture_dicts() if d["eventType"] == "TASK_DEFINITION_EVENT")
    newer = {**definition, "fieldOfANewerRay": 1}
    posted = parse_posted_event(newer)
    assert posted.json is None
    assert posted.event == parse_posted_event(definition).event
    spelled = {("session_name" if k == "sessionName" else k): v for k, v in definition.items()}
    spelled["taskDefinitionEvent"] = {**definition["taskDefinitionEvent"], "taskAttempt": "0"}
    posted = parse_posted_event(spelled)
    assert posted.json is spelled
    record = LogRecord.FromString(log_record_wire(posted.event, b"\x01" * 16, b"", 7, posted=posted.json))
    assert ray_event_from_log_record(record) == parse_posted_event(definition).event


def test_a_span_item_written_on_the_wire_equals_the_message() -> None:
    encoder = OtlpItemEncoder("ray")
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="f", start_time_unix_nano=5)
    span.attributes.add(key="k").value.string_value = "v"
    for session in ("session_a", "", "session_a"):
        expected = ResourceSpans(resource=encoder.resource(session))
        expected.scope_spans.add(scope=encoder.scope).spans.append(span)
        assert encoder.span_item(session, span) == expected.SerializeToString()
    for session in ("session_a", "", "session_b"):  # what the bridge's converter writes items in
        resource, scope = encoder.envelope_of(session)
        assert resource == encoder.resource(session).SerializeToString()
        assert scope == encoder.scope.SerializeToString()


def test_one_item_envelopes_and_others_join_the_same_groups() -> None:
    """One-item envelopes (the bridge's queue items) are read by a short path, any other shape by
    the general one: both land in the same resource and scope entries, in queue order."""
    resource, scope = b"\x0a\x05\x0a\x01k\x12\x00", b"\x0a\x02me"
    one = otlp_wire.resource_logs(resource, scope, [b"\x62\x01a"])
    two = otlp_wire.resource_logs(resource, scope, [b"\x62\x01b", b"\x62\x01c"])
    other = otlp_wire.resource_logs(resource, b"\x0a\x05other", [b"\x62\x01d"])
    merged = ExportLogsServiceRequest.FromString(otlp_wire.merge_envelopes([one, two, other, one]))
    (resource_logs,) = merged.resource_logs
    assert [(s.scope.name, [r.event_name for r in s.log_records]) for s in resource_logs.scope_logs] == [
        ("me", ["a", "b", "c", "a"]),
        ("other", ["d"]),
    ]
    with pytest.raises(ValueError):
        otlp_wire.merge_envelopes([one[:-1]])


def test_a_posts_items_read_in_one_pass_are_read_as_one_at_a_time() -> None:
    """The bridge reads a POST's items in one loop (`parse_posted_events`): the same events, the
    same objects kept as bodies, and the same errors as `parse_posted_event` item by item, for
    real events and for items the compiled reader hands back or refuses."""
    real = _fixture_dicts()
    definition = next(d for d in real if d["eventType"] == "TASK_DEFINITION_EVENT")
    odd: list[Any] = [
        {**definition, "fieldOfANewerRay": 1},  # read by json_format, not kept as a body
        {**definition, "eventType": "NOT_A_TYPE"},  # unknown type: an error
        {k: v for k, v in definition.items() if k != "eventType"},  # no type: an error
        {**definition, "timestamp": "2026-01-01T00:00:00+01:00"},  # an offset: Python reads it
        {**definition, "eventId": 5},  # not base64 text: an error
        [definition],
        "text",
        None,
    ]
    items = [*odd[:3], *real, *odd[3:]]
    posted, errors = parse_posted_events(items)
    one_at_a_time, errors_one_at_a_time = parse_each(items, parse_posted_event)
    kept = _kept(items)

    def shape(read: list[PostedEvent]) -> list[tuple[RayEvent, bool, bool]]:
        return [(p.event, p.json is item, p.json is None) for p, item in zip(read, kept, strict=True)]

    assert shape(posted) == shape(one_at_a_time)
    assert all(p.json is item for p, item in zip(posted[1 : 1 + len(real)], real, strict=True))  # read whole
    assert errors == errors_one_at_a_time
    assert len(errors) == 6 and len(posted) == len(items) - 6


def _kept(items: list[Any]) -> list[Any]:
    """The items `parse_posted_event` reads without an error, in order."""
    kept = []
    for item in items:
        try:
            parse_posted_event(item)
        except ValueError:
            continue
        kept.append(item)
    return kept
