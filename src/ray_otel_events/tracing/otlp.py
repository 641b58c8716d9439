"""OTLP exporters for spans and log records that are safe across fork.

A gRPC channel or a pooled HTTP connection made before a fork must not be used in the child, and
process pools fork workers that inherit the parent's exporters. These wrappers build the real SDK
exporter lazily in each process (the SDK exporter reads the standard OTEL_EXPORTER_OTLP_* variables
itself), so a child never touches its parent's connection.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ray_otel_events.config import ConfigError, otlp_signal_config
from ray_otel_events.tracing.otlp_spans import OtlpHttpSpanExporter


class _PerProcess:
    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._pid = -1
        self._exporter: Any = None

    def _get(self) -> Any:
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    self._exporter = self._factory()
                    self._pid = pid
        return self._exporter

    def _current(self) -> Any:
        return self._exporter if self._pid == os.getpid() else None

    def shutdown(self) -> None:
        exporter = self._current()
        if exporter is not None:
            exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        exporter = self._current()
        return True if exporter is None else bool(exporter.force_flush(timeout_millis))


class PerProcessSpanExporter(_PerProcess, SpanExporter):
    """Delegates to `factory()`'s exporter, made once in each process that exports."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result: SpanExportResult = self._get().export(spans)
        return result


class PerProcessLogRecordExporter(_PerProcess, LogRecordExporter):
    """Delegates to `factory()`'s exporter, made once in each process that exports."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result: LogRecordExportResult = self._get().export(batch)
        return result


# Read differently by the SDK's HTTP exporter (a timeout in seconds, where the spec and
# `otlp_signal_config` say milliseconds) or not read by ours (a client certificate and key): set,
# and the SDK's exporter is used, as before.
_SDK_ONLY_SETTINGS = tuple(
    f"OTEL_EXPORTER_OTLP{signal}_{name}"
    for signal in ("", "_TRACES")
    for name in ("TIMEOUT", "CLIENT_CERTIFICATE", "CLIENT_KEY")
)


def otlp_span_exporter(protocol: str) -> SpanExporter:
    """A fork-safe OTLP span exporter for `grpc` or `http/protobuf`: over HTTP our own encoder
    (tracing/otlp_spans.py) unless a setting is one the SDK's exporter reads in its own way
    (`_SDK_ONLY_SETTINGS`, or a compression other than gzip); the SDK's otherwise."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return PerProcessSpanExporter(GrpcSpanExporter)
    config = None
    if not any(os.environ.get(name, "").strip() for name in _SDK_ONLY_SETTINGS):
        try:
            config = otlp_signal_config("traces")
        except ConfigError:
            config = None
    if config is not None and config.protocol == "http/protobuf":
        return OtlpHttpSpanExporter(config)  # its HTTP session is made per process
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    return PerProcessSpanExporter(HttpSpanExporter)


def otlp_log_exporter(protocol: str) -> LogRecordExporter:
    """The SDK's OTLP log record exporter for `grpc` or `http/protobuf`, fork-safe."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        return PerProcessLogRecordExporter(GrpcLogExporter)
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter

    return PerProcessLogRecordExporter(HttpLogExporter)
