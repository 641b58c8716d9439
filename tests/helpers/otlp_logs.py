"""Log records as our tracing hooks make them, through the real OpenTelemetry SDK: task log lines
(each carrying the task's id and the stream it was written on) and RayEvents."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry._logs import Logger, SeverityNumber

from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

STDOUT_LINE = "about to fail"
STDERR_LINE = "Traceback: ValueError dashboard test failure"


def export_log_lines(endpoint: str, task_id: str) -> None:
    """One stdout line and one stderr line of task `task_id`, POSTed to `endpoint` (/v1/logs)."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint)))
    logger = provider.get_logger("ray_otel_events.task_logs")
    for stream, text in (("stdout", STDOUT_LINE), ("stderr", STDERR_LINE)):
        logger.emit(body=text, attributes={"ray.task_id": task_id, "log.iostream": stream})
    provider.shutdown()


def emit_ray_events(logger: Logger, events: Iterable[RayEvent]) -> None:
    """Each event as the OTel log record our pipeline makes of it, emitted through `logger`."""
    for event in events:
        fields = to_log_record(event)
        logger.emit(
            timestamp=fields.timestamp_ns,
            severity_number=SeverityNumber(fields.severity_number),
            body=fields.body,
            attributes=fields.attributes,
            event_name=fields.event_name,
        )
