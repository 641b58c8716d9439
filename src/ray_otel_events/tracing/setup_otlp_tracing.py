"""Startup hook: spans and event log records over OTLP to a Collector or Jaeger.

    ray start --head --tracing-startup-hook=ray_otel_events.tracing.setup_otlp_tracing:setup_tracing

Configured only by the standard variables, read by the OpenTelemetry SDK: OTEL_EXPORTER_OTLP_ENDPOINT
(or the per-signal _TRACES_/_LOGS_ forms), _HEADERS, _TIMEOUT, _COMPRESSION, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*/OTEL_BLRP_*; and OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf`,
the default, or `grpc`). Task logs (prints and `logging` in a task, with its trace context) are
exported as OTLP logs beside the spans. Over http/protobuf, spans are posted as requests our
encoder writes (tracing/otlp_spans.py, the SDK's bytes without its per-span protobuf objects) and
event records skip the SDK's logs pipeline (tracing/otlp_event_logs.py: a third of the CPU); over
grpc both go through the SDK. Batches are
flushed when a process ends, including multiprocessing children.
The hook never raises: a problem is reported once and the process runs on.
"""

from __future__ import annotations

from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ray_otel_events.config import OtlpProtocols, TracingConfig, otlp_signal_config
from ray_otel_events.tracing.install import current_installation, install_tracing
from ray_otel_events.tracing.otlp import otlp_log_exporter, otlp_span_exporter
from ray_otel_events.tracing.otlp_event_logs import OtlpEventLogSink
from ray_otel_events.tracing.report import report_setup_failure
from ray_otel_events.tracing.task_events import PRODUCER

HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"


def setup_tracing() -> None:
    try:
        if current_installation() is not None:
            install_tracing()  # already installed here or in the fork parent: adopt it
            return
        config = TracingConfig.from_env()
        protocols = OtlpProtocols.from_env()
        resource = Resource.create()
        event_logs = config.event_logs is not False
        event_log_sink = None
        if event_logs and protocols.logs == "http/protobuf":
            event_log_sink = OtlpEventLogSink(
                otlp_signal_config("logs"), dict(resource.attributes), producer=PRODUCER
            )
        install_tracing(
            [BatchSpanProcessor(otlp_span_exporter(protocols.traces))],
            [BatchLogRecordProcessor(otlp_log_exporter(protocols.logs))],
            config=config,
            resource=resource,
            event_logs=event_logs,
            event_log_sink=event_log_sink,
        )
    except Exception as exc:  # a hook must never take its process down
        report_setup_failure(HOOK, exc)
