"""Submission spans created off the submitting thread are the spans whose context was propagated."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ray_otel_events.tracing.deferred_spans import DeferredSpans, PresetIdGenerator, record_submit_span
from ray_otel_events.tracing.direct_spans import DirectSpan, DirectTracer
from ray_otel_events.tracing.files import SpanFileProcessor
from ray_otel_events.tracing.propagation import carrier_of
from ray_otel_events.tracing.provider import CachingTracerProvider

PARENT_BASED = ParentBased(ALWAYS_ON)  # the SDK's default sampler
ATTRS = {"ray.remote": "function", "ray.function": "m.f"}


def _provider(
    sampler: Sampler = PARENT_BASED, *, direct: bool = False
) -> tuple[DeferredSpans, TracerProvider, InMemorySpanExporter]:
    """An SDK provider, or ours (`direct`), whose tracers make DirectSpans from the chosen ids."""
    deferred = DeferredSpans(linger_s=60)  # only explicit flushes create spans here
    provider_class = CachingTracerProvider if direct else TracerProvider
    provider = provider_class(sampler=sampler, id_generator=deferred.id_generator)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return deferred, provider, exporter


def _context_of(carrier: dict[str, str]) -> SpanContext:
    ctx = TraceContextTextMapPropagator().extract(carrier)
    return trace.get_current_span(ctx).get_span_context()


@pytest.mark.parametrize("direct", [False, True], ids=["sdk spans", "direct spans"])
def test_a_root_submission_becomes_the_span_its_carrier_names(direct: bool) -> None:
    deferred, provider, exporter = _provider(direct=direct)
    tracer = provider.get_tracer("t")
    assert deferred.can_defer(tracer)
    carrier = record_submit_span(tracer, "m.f ray.remote", ATTRS, deferred, carrier_of)
    assert exporter.get_finished_spans() == ()  # nothing created on the submitting thread
    deferred.flush()
    (span,) = exporter.get_finished_spans()
    propagated = _context_of(carrier)
    assert span.context is not None
    assert (span.context.trace_id, span.context.span_id) == (propagated.trace_id, propagated.span_id)
    assert span.context.trace_flags == propagated.trace_flags == TraceFlags(0x03)  # sampled, random id
    assert span.parent is None and span.kind is SpanKind.PRODUCER and span.name == "m.f ray.remote"
    assert dict(span.attributes or {}) == ATTRS
    assert span.start_time is not None and span.end_time is not None
    assert 0 <= span.end_time - span.start_time < 10**9
    assert deferred.created == 1 and deferred.mismatched == 0
    assert isinstance(span, DirectSpan) == direct


@pytest.mark.parametrize("direct", [False, True], ids=["sdk spans", "direct spans"])
def test_a_nested_submission_keeps_its_parent_and_trace_state(direct: bool) -> None:
    deferred, provider, exporter = _provider(direct=direct)
    tracer = provider.get_tracer("t")
    parent = SpanContext(
        0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])
    )
    token = context_api.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
    try:
        carrier = record_submit_span(tracer, "m.f ray.remote", ATTRS, deferred, carrier_of)
    finally:
        context_api.detach(token)
    assert carrier["tracestate"] == "k=v"
    deferred.flush()
    (span,) = exporter.get_finished_spans()
    assert span.parent is not None and span.parent.span_id == 0xDEF
    assert span.context is not None and span.context.trace_id == 0xABC
    assert span.context.span_id == _context_of(carrier).span_id
    assert span.context.trace_flags == TraceFlags(1)  # the parent's flags: not a random trace id
    assert deferred.mismatched == 0


def test_unsampled_submissions_propagate_but_create_nothing() -> None:
    deferred, provider, exporter = _provider(ALWAYS_OFF)
    carrier = record_submit_span(provider.get_tracer("t"), "m.f ray.remote", ATTRS, deferred, carrier_of)
    assert carrier["traceparent"].endswith("-02")  # not sampled (random trace id flag only)
    deferred.flush()
    assert exporter.get_finished_spans() == () and deferred.created == 0


@pytest.mark.parametrize("direct", [False, True], ids=["sdk spans", "direct spans"])
def test_ratio_sampling_agrees_with_what_was_propagated(direct: bool) -> None:
    deferred, provider, exporter = _provider(TraceIdRatioBased(0.5), direct=direct)
    tracer = provider.get_tracer("t")
    carriers = [record_submit_span(tracer, "m.f ray.remote", ATTRS, deferred, carrier_of) for _ in range(400)]
    deferred.flush()
    sampled = {_context_of(c).span_id for c in carriers if _context_of(c).trace_flags.sampled}
    assert 100 < len(sampled) < 300
    assert {s.context.span_id for s in exporter.get_finished_spans() if s.context} == sampled
    assert deferred.mismatched == 0


class _CustomSampler(Sampler):
    def should_sample(self, *args: object, **kwargs: object) -> SamplingResult:
        return ALWAYS_ON.should_sample(*args, **kwargs)  # type: ignore[arg-type]

    def get_description(self) -> str:
        return "custom"


@pytest.mark.parametrize("case", ["custom sampler", "foreign provider", "no deferral"])
def test_other_providers_get_their_span_synchronously(case: str) -> None:
    deferred, provider, exporter = _provider(_CustomSampler() if case == "custom sampler" else ALWAYS_ON)
    if case == "foreign provider":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    assert not deferred.can_defer(tracer) or case == "no deferral"
    carrier = record_submit_span(
        tracer, "m.f ray.remote", ATTRS, None if case == "no deferral" else deferred, carrier_of
    )
    (span,) = exporter.get_finished_spans()  # already there, no flush needed
    assert span.context is not None and span.context.span_id == _context_of(carrier).span_id
    assert deferred.created == 0


def test_spans_created_elsewhere_on_the_provider_get_random_ids() -> None:
    deferred, provider, _ = _provider()
    tracer = provider.get_tracer("t")
    record_submit_span(tracer, "m.f ray.remote", ATTRS, deferred, carrier_of)
    ids = {tracer.start_span("x").get_span_context().span_id for _ in range(100)}
    deferred.flush()
    ids |= {tracer.start_span("x").get_span_context().span_id for _ in range(100)}
    assert len(ids) == 200 and deferred.created == 1


def test_preset_ids_go_to_the_next_span_of_the_presetting_thread_only() -> None:
    ids = PresetIdGenerator()
    seen: list[tuple[int, int]] = []
    with ids.preset(123, 456):
        other = threading.Thread(
            target=lambda: seen.append((ids.generate_trace_id(), ids.generate_span_id()))
        )
        other.start()
        other.join()
        assert ids.generate_trace_id() == 123 and ids.generate_span_id() == 456
        assert ids.generate_span_id() != 456  # used once: the next span gets random ids
    (other_ids,) = seen
    assert other_ids != (123, 456) and all(other_ids)
    assert ids.generate_trace_id() != 123 and 0 < ids.generate_trace_id() < 1 << 128
    assert 0 < ids.generate_span_id() < 1 << 64


def test_with_only_span_files_a_submission_spans_line_is_written_from_what_was_recorded(
    tmp_path: Path,
) -> None:
    """The local hook's provider: the line is the one the span would have had (the SDK's to_json),
    for roots, children, plain and other attributes, in the order of the submissions."""
    deferred = DeferredSpans(linger_s=60)
    provider = CachingTracerProvider(id_generator=deferred.id_generator)
    files = SpanFileProcessor(str(tmp_path), linger_s=60)
    provider.add_span_processor(files)
    tracer = provider.get_tracer("t")
    assert isinstance(tracer, DirectTracer)
    deferred.record(tracer, "m.f ray.remote", ATTRS, carrier_of)
    with trace.use_span(tracer.start_span("parent")):  # never ended: no line of its own
        deferred.record(tracer, "m.f ray.remote", {**ATTRS, "x": "y", "ray.task_id": "ab"}, carrier_of)
    deferred.record(tracer, "m.g ray.remote", None, carrier_of)
    deferred.record(
        tracer, "m.h ray.remote", {"n": 1, "s": '\u00e9"q'}, carrier_of
    )  # not all strings: made as a span
    items = list(deferred.queue._items)
    deferred.flush()
    assert files.force_flush()
    expected = []
    for item in items:
        span = DirectSpan(
            item.name,
            item.span_context,
            item.parent_span,
            tracer,
            SpanKind.PRODUCER,
            dict(item.sampled_attributes or {}),
            (),
            True,
            True,
        )
        span._start_time, span._end_time = item.start_ns, item.end_ns
        expected.append(span.to_json(indent=None))
    assert (tmp_path / f"{os.getpid()}.json").read_text().splitlines() == expected
    assert deferred.created == 4 and items[1].parent_span is not None
    assert files.writer.written == 4


def test_submission_lines_are_written_by_the_deferred_thread_not_handed_to_the_writers(
    tmp_path: Path,
) -> None:
    deferred = DeferredSpans(linger_s=60)
    provider = CachingTracerProvider(id_generator=deferred.id_generator)
    files = SpanFileProcessor(str(tmp_path), linger_s=60)
    provider.add_span_processor(files)
    tracer = provider.get_tracer("t")
    for _ in range(3):
        deferred.record(tracer, "m.f ray.remote", ATTRS, carrier_of)
    deferred.flush()
    assert files.writer.written == 3 and files.writer.queue._thread is None  # never started
