"""The sink's OTLP routes: each OTLP/HTTP request becomes one line of spec OTLP/JSON in its file.

A line is the request as OTLP/JSON (`{"resourceSpans": [...]}` or `{"resourceLogs": [...]}`, the
same shape as the OTLP file exporter's TracesData / LogsData lines), whichever encoding it arrived
in, so tests and users see exactly what a Collector would receive.
"""

from __future__ import annotations

import orjson
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.otel import otlp_json
from ray_otel_events.receivers.otlp_http import ConsumeResult, OtlpConsumer, OtlpHttpReceiver
from ray_otel_events.services.sink import MAX_BODY_BYTES, JsonLinesSink


class OtlpJsonLinesConsumer(OtlpConsumer):
    def __init__(self, sink: JsonLinesSink) -> None:
        self.sink = sink

    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        self.sink.write_lines([orjson.dumps(otlp_json.to_json(request))])
        return ConsumeResult()

    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        self.sink.write_lines([orjson.dumps(otlp_json.to_json(request))])
        return ConsumeResult()


def otlp_routes(sink: JsonLinesSink) -> list[web.RouteDef]:
    """`/v1/traces` and `/v1/logs` for the sink's app."""
    receiver = OtlpHttpReceiver(OtlpJsonLinesConsumer(sink), MAX_BODY_BYTES)
    return receiver.routes()
