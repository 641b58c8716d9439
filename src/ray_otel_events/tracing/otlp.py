"""OTLP exporters for spans and log records that are safe across fork.

A gRPC channel or a pooled HTTP connection made before a fork must not be used in the child, and
process pools fork workers that inherit the parent's exporters. These wrappers build the real SDK
exporter lazily in each process (the SDK exporter reads the standard OTEL_EXPORTER_OTLP_* variables
itself), so a child never touches its parent's connection.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ray_otel_events.config import ConfigError, OtlpSignalConfig, otlp_signal_config, otlp_timeout_s
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


def _spec_timeout_s(signal: str) -> float | None:
    """The export timeout as the spec (and our docs, and our own exporters) read it, in
    milliseconds, when one is set: the SDK's exporters read the same variables as seconds, so
    theirs is given to them explicitly (`OTEL_EXPORTER_OTLP_TIMEOUT=5000` is 5 s for every
    exporter of the hook, not 5 s for records and 83 minutes for spans). None when none is set or
    it cannot be read (the SDK then reads it as it does)."""
    try:
        return otlp_timeout_s(signal)
    except ConfigError:
        return None


def _sdk_factory(exporter_cls: Callable[..., Any], signal: str) -> Callable[[], Any]:
    timeout_s = _spec_timeout_s(signal)
    return exporter_cls if timeout_s is None else functools.partial(exporter_cls, timeout=timeout_s)


def otlp_span_exporter(protocol: str) -> SpanExporter:
    """A fork-safe OTLP span exporter for `grpc` or `http/protobuf`: over HTTP our own encoder
    (tracing/otlp_spans.py), client certificate included, unless a setting is one it does not take
    (a compression other than gzip); the SDK's otherwise."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return PerProcessSpanExporter(_sdk_factory(GrpcSpanExporter, "traces"))
    try:
        config: OtlpSignalConfig | None = otlp_signal_config("traces")
    except ConfigError:
        config = None
    if config is not None and config.protocol == "http/protobuf":
        return OtlpHttpSpanExporter(config)  # its HTTP session is made per process
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    return PerProcessSpanExporter(_sdk_factory(HttpSpanExporter, "traces"))


def otlp_log_exporter(protocol: str) -> LogRecordExporter:
    """The SDK's OTLP log record exporter for `grpc` or `http/protobuf`, fork-safe."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        return PerProcessLogRecordExporter(_sdk_factory(GrpcLogExporter, "logs"))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter

    return PerProcessLogRecordExporter(_sdk_factory(HttpLogExporter, "logs"))
