"""A span started under an actor constructor's execution span that has ended is a root.

Ray makes `<Class>.__init__ ray.remote_worker` current while an actor's constructor runs, and
whatever the constructor starts (asyncio tasks, threads: Serve's proxy HTTP server, its controller's
loop) keeps that context for the actor's lifetime. Work started there after the constructor
returned must not join the trace that created the actor; work done during it still nests. Both
span paths of our tracer (direct spans, and SDK spans when a foreign processor is present) do it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from ray_otel_events.tracing.provider import CachingTracerProvider, replace_sampler

CONSTRUCTOR = "ProxyActor.__init__ ray.remote_worker"
SAMPLED_CALLER = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))


class ForeignProcessor(SpanProcessor):
    """A processor we know nothing about: the provider then makes SDK spans."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass


@pytest.fixture(params=["direct", "sdk"])
def tracer(request: pytest.FixtureRequest) -> tuple[trace.Tracer, InMemorySpanExporter]:
    provider = CachingTracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if request.param == "sdk":
        provider.add_span_processor(ForeignProcessor())
    return provider.get_tracer("ray.util.tracing.tracing_helper"), exporter


def _by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_work_a_constructor_started_is_outside_its_trace_once_it_returned(
    tracer: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer_, exporter = tracer

    async def actor() -> None:
        served = asyncio.Event()

        async def server() -> None:  # started by the constructor, serves after it returned
            await served.wait()
            with (
                tracer_.start_as_current_span("request", kind=SpanKind.SERVER),
                tracer_.start_as_current_span("Replica.call ray.remote", kind=SpanKind.PRODUCER),
            ):
                pass

        token = context.attach(baggage.set_baggage("tenant", "a"))
        try:
            with tracer_.start_as_current_span(CONSTRUCTOR, kind=SpanKind.CONSUMER):
                task = asyncio.get_running_loop().create_task(server())
                with tracer_.start_as_current_span("Controller.get_config ray.remote"):
                    pass  # during the constructor: its child
        finally:
            context.detach(token)
        served.set()
        await task

    asyncio.run(actor())
    spans = _by_name(exporter)
    constructor, during = spans[CONSTRUCTOR], spans["Controller.get_config ray.remote"]
    request, call = spans["request"], spans["Replica.call ray.remote"]
    assert during.parent is not None and during.parent.span_id == constructor.context.span_id
    assert request.parent is None and request.context.trace_id != constructor.context.trace_id
    assert call.parent is not None and call.parent.span_id == request.context.span_id


def test_only_ended_constructor_spans_are_left(tracer: tuple[trace.Tracer, InMemorySpanExporter]) -> None:
    tracer_, exporter = tracer
    ended_task = tracer_.start_span("f ray.remote_worker", kind=SpanKind.CONSUMER)
    ended_task.end()
    ended_method = tracer_.start_span("Actor.__call__ ray.remote_worker", kind=SpanKind.CONSUMER)
    ended_method.end()
    for parent in (ended_task, ended_method):
        child = tracer_.start_span("child", trace.set_span_in_context(parent))
        child.end()
        assert child.parent is not None and child.parent.span_id == parent.get_span_context().span_id
    # A remote parent (what Ray extracts from `_ray_trace_ctx`) is never left, whatever its name.
    remote = trace.NonRecordingSpan(ended_task.get_span_context())
    child = tracer_.start_span("under remote", trace.set_span_in_context(remote))
    child.end()
    assert child.parent is not None and child.parent.span_id == remote.get_span_context().span_id
    assert len(exporter.get_finished_spans()) == 5


def test_the_sampler_decides_such_a_span_as_a_root() -> None:
    """Under Serve's ParentBasedTraceIdRatio(0), a request span the proxy's server starts after the
    constructor returned is a root, so dropped; one started during the constructor follows it."""
    provider = CachingTracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    replace_sampler(provider, ParentBasedTraceIdRatio(0.0))
    tracer = provider.get_tracer("ray.serve._private.tracing_utils")
    with trace.use_span(trace.NonRecordingSpan(SAMPLED_CALLER)):  # the controller's sampled call
        constructor = tracer.start_span(CONSTRUCTOR, kind=SpanKind.CONSUMER)
    inside = trace.set_span_in_context(constructor)
    assert tracer.start_span("during", inside).get_span_context().trace_flags.sampled
    constructor.end()
    assert not tracer.start_span("after", inside).get_span_context().trace_flags.sampled
