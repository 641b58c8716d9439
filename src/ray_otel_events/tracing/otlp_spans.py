"""The OTLP hook's span exporter over HTTP/protobuf: requests written by our encoder, not the SDK's.

Only the exporter changes: the SDK's `BatchSpanProcessor` still queues and batches the spans and
calls `export` on its thread. There the SDK's exporter built a protobuf object per span, attribute
and event (`encode_spans`); this one writes the same bytes directly (`otel/otlp_span_encoder.py`)
and posts them with the settings the SDK exporter reads (`config.otlp_signal_config("traces")`),
retried as the event records are (`tracing/otlp_http.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.metrics import Counters
from ray_otel_events.otel.otlp_span_encoder import spans_request
from ray_otel_events.tracing.otlp_http import OtlpHttpPoster

EXPORTED = "exported_spans"


class OtlpHttpSpanExporter(SpanExporter):
    """A `SpanExporter` posting `ExportTraceServiceRequest`s to an OTLP/HTTP protobuf endpoint."""

    def __init__(self, config: OtlpSignalConfig) -> None:
        self.counters = Counters("otlp_spans")
        self._poster = OtlpHttpPoster(config, self.counters, exported=EXPORTED)
        self._shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut_down:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        delivered = self._poster.post(spans_request(spans), len(spans), what="spans")
        return SpanExportResult.SUCCESS if delivered else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is held here: the batch processor holds the spans
