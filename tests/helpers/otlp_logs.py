"""Task log lines sent to `serve` as the tracing hooks send them: OTLP log records from the real
OpenTelemetry SDK exporter, each carrying the task's id and the stream it was written on."""

from __future__ import annotations

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
