"""Our span and log record JSON lines are byte-identical to the SDK's own `to_json(indent=None)`."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ray_otel_events.otel.span_json import log_record_to_json_line, span_to_json_line


def test_span_lines_equal_the_sdks() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "k": 3, "list": ["a", "b"]}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span('root ünïcode "quoted"') as root:
        root.set_attribute("tuple", (1, 2, 3))
        root.set_attribute("float", 0.1)
        root.add_event("ev", {"a": "b"}, timestamp=1_700_000_000_123_456_789)
        with tracer.start_as_current_span(
            "child", kind=SpanKind.CONSUMER, links=[Link(root.get_span_context(), {"l": 1})]
        ):
            pass
        try:
            with tracer.start_as_current_span("failing", kind=SpanKind.PRODUCER):
                raise ValueError("boom\nwith newline")
        except ValueError:
            pass
        ok = tracer.start_span("ok", start_time=1)
        ok.set_status(Status(StatusCode.OK))
        ok.end(end_time=999_999_999)
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    for span in spans:
        assert span_to_json_line(span) == span.to_json(indent=None)


def test_log_record_lines_equal_the_sdks() -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("t")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        ctx = trace.set_span_in_context(span)
        logger.emit(
            timestamp=1_700_000_000_000_000_001,
            context=ctx,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body={"eventType": "TASK_LIFECYCLE_EVENT", "nested": {"list": [1, "x"]}},
            attributes={"ray.event.x": "y", "n": 3, "l": ["a"]},
            event_name="ray.task_lifecycle_event",
        )
    logger.emit(body="plain", severity_number=SeverityNumber.WARN)
    records = exporter.get_finished_logs()
    assert len(records) == 2
    for record in records:
        assert isinstance(record, ReadableLogRecord)
        assert log_record_to_json_line(record) == record.to_json(indent=None)
