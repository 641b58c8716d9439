"""The provider our hooks install hands out one tracer per name, the SDK's own, and spans still flow."""

from __future__ import annotations

from opentelemetry.sdk.trace import Tracer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ray_otel_events.tracing.provider import CachingTracerProvider


def test_one_tracer_per_name_and_spans_flow() -> None:
    provider = CachingTracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    first = provider.get_tracer("ray.util.tracing.tracing_helper")
    assert isinstance(first, Tracer)
    assert provider.get_tracer("ray.util.tracing.tracing_helper") is first
    assert provider.get_tracer("other") is not first
    # A scope with a version or attributes is the SDK's business, and the SDK's tracer for the
    # plain name is the same object we cache (one registry).
    versioned = provider.get_tracer("ray.util.tracing.tracing_helper", "1.0")
    assert versioned is not first
    assert _sdk_get_tracer(provider, "ray.util.tracing.tracing_helper") is first
    first.start_span("s").end()
    (span,) = exporter.get_finished_spans()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "ray.util.tracing.tracing_helper"


def _sdk_get_tracer(provider: CachingTracerProvider, name: str) -> object:
    """The SDK's own answer, bypassing our cache."""
    return super(CachingTracerProvider, provider).get_tracer(name)
