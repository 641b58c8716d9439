"""`ray-otel-events sink` takes OTLP/HTTP (protobuf, JSON, gzip) and writes one OTLP/JSON line per request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests
from helpers.agg_procs import CliServer, read_jsonl
from helpers.bridge_procs import start_sink, url, wait_until
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ray_otel_events.otel import otlp_json


@pytest.fixture(scope="module")
def sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CliServer, Path]]:
    server, path = start_sink(tmp_path_factory.mktemp("sink"), "otlp")
    try:
        yield server, path
    finally:
        server.close()


def _spans(name: str) -> list[ReadableSpan]:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span(name, attributes={"n": 1}) as span:
        span.add_event("e")
    return list(memory.get_finished_spans())


def _line_for(path: Path, key: str, name: str) -> dict[str, object]:
    def matching() -> list[dict[str, object]]:
        return [line for line in read_jsonl(path) if name.encode() in orjson.dumps(line) and key in line]

    (line,) = wait_until(matching, 1)
    return line


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_sdk_span_exporter_protobuf(sink: tuple[CliServer, Path], compression: Compression) -> None:
    server, path = sink
    name = f"span-{compression.value}"
    spans = _spans(name)
    exporter = OTLPSpanExporter(endpoint=url(server, "/v1/traces"), compression=compression)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    line = _line_for(path, "resourceSpans", name)
    assert otlp_json.traces_request_from_json(line) == encode_spans(spans)
    span = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]  # type: ignore[index]
    assert span["traceId"] == format(spans[0].context.trace_id, "032x")  # hex, as the spec says
    assert isinstance(span["kind"], int) and isinstance(span["startTimeUnixNano"], str)


def test_sdk_log_exporter_protobuf(sink: tuple[CliServer, Path]) -> None:
    server, path = sink
    provider = LoggerProvider()
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=url(server, "/v1/logs")))
    )
    provider.get_logger("t").emit(body={"k": "log-line-1"}, event_name="app.event", timestamp=42)
    provider.shutdown()
    line = _line_for(path, "resourceLogs", "log-line-1")
    assert otlp_json.logs_request_from_json(line) == encode_logs(memory.get_finished_logs())


def test_otlp_json_request(sink: tuple[CliServer, Path]) -> None:
    server, path = sink
    request = encode_spans(_spans("json-span"))
    response = requests.post(
        url(server, "/v1/traces"),
        data=orjson.dumps(otlp_json.to_json(request)),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200 and response.json() == {}
    assert otlp_json.traces_request_from_json(_line_for(path, "resourceSpans", "json-span")) == request


def test_bad_otlp_is_refused_and_json_arrays_still_work(sink: tuple[CliServer, Path]) -> None:
    server, path = sink
    response = requests.post(
        url(server, "/v1/traces"),
        data=b"\x0a\xff",
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert response.status_code == 400
    response = requests.post(url(server, "/events"), json=[{"marker": "plain-array"}], timeout=30)
    assert response.status_code == 200
    assert wait_until(lambda: [x for x in read_jsonl(path) if x.get("marker") == "plain-array"], 1)
