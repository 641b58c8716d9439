"""Spec OTLP/JSON codec: hex ids, integer enums, int64 strings, camelCase; never json_format."""

from __future__ import annotations

import base64
import copy
import math

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from ray_otel_events.otel import otlp_json

# Hand-written after opentelemetry-proto's examples/trace.json: what a spec-compliant sender posts.
SPEC_TRACE = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
            "scopeSpans": [
                {
                    "scope": {"name": "my.library", "version": "1.0.0"},
                    "spans": [
                        {
                            "traceId": "5B8EFFF798038103D269B633813FC60C",
                            "spanId": "EEE19B7EC3C1B174",
                            "parentSpanId": "EEE19B7EC3C1B173",
                            "name": "I'm a server span",
                            "startTimeUnixNano": "1544712660000000000",
                            "endTimeUnixNano": 1544712661000000000,
                            "kind": 2,
                            "attributes": [
                                {"key": "my.span.attr", "value": {"stringValue": "some value"}},
                                {"key": "n", "value": {"intValue": "9007199254740993"}},
                                {"key": "f", "value": {"doubleValue": 1.5}},
                                {"key": "b", "value": {"boolValue": True}},
                                {"key": "raw", "value": {"bytesValue": "AAEC"}},
                                {"key": "a", "value": {"arrayValue": {"values": [{"intValue": 1}]}}},
                                {"key": "kv", "value": {"kvlistValue": {"values": []}}},
                            ],
                            "events": [{"timeUnixNano": "1544712660500000000", "name": "e"}],
                            "links": [
                                {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b172"}
                            ],
                            "status": {"code": 2, "message": "boom"},
                        }
                    ],
                }
            ],
        }
    ]
}


def _sdk_spans() -> ExportTraceServiceRequest:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test", "0.1")
    with tracer.start_as_current_span(
        "parent", kind=SpanKind.SERVER, attributes={"i": 7, "l": [1.5, 2.5]}
    ) as span:
        span.add_event("ev", {"s": "x", "b": False})
        with tracer.start_as_current_span("child", kind=SpanKind.PRODUCER) as child:
            child.set_status(Status(StatusCode.ERROR, "bad"))
    return encode_spans(memory.get_finished_spans())


def _sdk_logs() -> ExportLogsServiceRequest:
    provider = LoggerProvider()
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("test")
    logger.emit(
        body={"k": [1, "two", {"three": 3.0}]}, event_name="my.event", attributes={"a": 1}, timestamp=5
    )
    return encode_logs(memory.get_finished_logs())


def test_sdk_requests_round_trip_exactly() -> None:
    for request in (_sdk_spans(), _sdk_logs()):
        encoded = orjson.dumps(otlp_json.to_json(request))
        assert otlp_json.from_json(orjson.loads(encoded), type(request)) == request


def test_writes_hex_ids_integer_enums_and_int64_strings() -> None:
    request = _sdk_spans()
    value = otlp_json.to_json(request)
    span = value["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    original = request.resource_spans[0].scope_spans[0].spans[0]
    assert span["traceId"] == original.trace_id.hex() and len(span["traceId"]) == 32
    assert span["spanId"] == original.span_id.hex() and len(span["spanId"]) == 16
    assert isinstance(span["kind"], int)
    assert span["startTimeUnixNano"] == str(original.start_time_unix_nano)
    # json_format would have written base64 ids and enum names: the reason this module exists.
    wrong = json_format.MessageToDict(original)
    assert wrong["traceId"] != span["traceId"] and isinstance(wrong["kind"], str)
    assert "start_time_unix_nano" not in span  # camelCase only


def test_reads_the_spec_example() -> None:
    request = otlp_json.traces_request_from_json(SPEC_TRACE)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id == bytes.fromhex("5b8efff798038103d269b633813fc60c")  # hex is case-insensitive
    assert span.parent_span_id == bytes.fromhex("eee19b7ec3c1b173")
    assert span.kind == 2 and span.status.code == 2
    assert span.start_time_unix_nano == 1544712660000000000
    assert span.end_time_unix_nano == 1544712661000000000  # int64 as a number is accepted too
    attrs = {kv.key: kv.value for kv in span.attributes}
    assert attrs["n"].int_value == 9007199254740993  # beyond 2**53: strings keep it exact
    assert attrs["raw"].bytes_value == b"\x00\x01\x02"  # other bytes fields stay base64
    assert attrs["kv"].WhichOneof("value") == "kvlist_value"  # an empty kvlist is still a kvlist
    assert span.links[0].span_id == bytes.fromhex("eee19b7ec3c1b172")
    assert otlp_json.to_json(request)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == (
        "5b8efff798038103d269b633813fc60c"
    )


def test_unknown_fields_are_ignored_and_enum_names_tolerated() -> None:
    value = copy.deepcopy(SPEC_TRACE)
    span = value["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["someFutureField"] = {"nested": [1, 2]}
    value["resourceSpans"][0]["futureEnvelopeField"] = "x"
    span["kind"] = "SPAN_KIND_CLIENT"
    span["start_time_unix_nano"] = span.pop("startTimeUnixNano")  # proto names are read as well
    request = otlp_json.traces_request_from_json(value)
    parsed = request.resource_spans[0].scope_spans[0].spans[0]
    assert parsed.kind == 3
    assert parsed.start_time_unix_nano == 1544712660000000000


@pytest.mark.parametrize(
    ("mutate", "where", "what"),
    [
        (
            lambda s: s.update(traceId=base64.b64encode(bytes(range(16))).decode()),
            "spans[0].traceId",
            "base64",
        ),
        (lambda s: s.update(spanId="7u4ZfsPBsXQ="), "spans[0].spanId", "base64"),
        (lambda s: s.update(traceId="zz" * 16), "spans[0].traceId", "hex"),
        (lambda s: s.update(parentSpanId="abc"), "spans[0].parentSpanId", "16 hex characters"),
        (lambda s: s.update(startTimeUnixNano="soon"), "spans[0].startTimeUnixNano", "integer"),
        (lambda s: s.update(startTimeUnixNano=-1), "spans[0].startTimeUnixNano", "out of range"),
        (lambda s: s.update(kind="SPAN_KIND_NOPE"), "spans[0].kind", "unknown"),
        (lambda s: s.update(name=5), "spans[0].name", "string"),
        (lambda s: s.update(attributes={"k": "v"}), "spans[0].attributes", "array"),
        (lambda s: s["events"][0].update(timeUnixNano=True), "events[0].timeUnixNano", "boolean"),
    ],
)
def test_bad_values_name_the_path(mutate: object, where: str, what: str) -> None:
    value = copy.deepcopy(SPEC_TRACE)
    mutate(value["resourceSpans"][0]["scopeSpans"][0]["spans"][0])  # type: ignore[operator]
    with pytest.raises(otlp_json.OtlpJsonError) as info:
        otlp_json.traces_request_from_json(value)
    message = str(info.value)
    assert where in message and what in message, message
    assert message.startswith("resourceSpans[0].scopeSpans[0]")


def test_not_an_object() -> None:
    with pytest.raises(otlp_json.OtlpJsonError, match="expected an object, got an array"):
        otlp_json.traces_request_from_json([1])
    with pytest.raises(otlp_json.OtlpJsonError, match="resourceLogs: expected an array"):
        otlp_json.logs_request_from_json({"resourceLogs": {}})


def test_special_doubles() -> None:
    value = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"doubleValue": "NaN"}}]}]}]}
    request = otlp_json.logs_request_from_json(value)
    assert math.isnan(request.resource_logs[0].scope_logs[0].log_records[0].body.double_value)
    assert otlp_json.to_json(request)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"] == {
        "doubleValue": "NaN"
    }
