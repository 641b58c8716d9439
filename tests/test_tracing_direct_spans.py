"""Direct spans (tracing/direct_spans.py) come out exactly as SDK spans do, and only where allowed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from ray_otel_events.otel.span_json import span_fields_to_json_line, span_to_json_line
from ray_otel_events.tracing.direct_spans import DirectSpan, new_span_context
from ray_otel_events.tracing.provider import CachingTracerProvider


class ForeignProcessor(SpanProcessor):
    """A processor we know nothing about: it may rely on SDK span internals."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span)


def _provider(foreign: bool) -> tuple[CachingTracerProvider, InMemorySpanExporter]:
    provider = CachingTracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if foreign:
        provider.add_span_processor(ForeignProcessor())
    return provider, exporter


def _workload(tracer: trace.Tracer) -> None:
    """Everything user code may do to spans, nested, with an exception and limits exceeded."""
    attributes = {"a": "1", "n": 2}
    with tracer.start_as_current_span("parent", kind=SpanKind.PRODUCER, attributes=attributes) as parent:
        parent.set_attribute("list", ["x", "y"])
        parent.set_attribute("bad", {"not": "allowed"})
        parent.add_event("ev", {"k": "v", "t": (1, 2)}, timestamp=1_700_000_000_000_000_000)
        parent.add_event("bare", timestamp=1_700_000_000_500_000_000)
        parent.update_name("parent-renamed")
        for i in range(200):
            parent.set_attribute(f"k{i}", i)
        with pytest.raises(ValueError), tracer.start_as_current_span("child", kind=SpanKind.CONSUMER):
            raise ValueError("boom")
        child_ctx = trace.get_current_span().get_span_context()
        other = tracer.start_span("linked", links=[Link(child_ctx, {"l": True})])
        other.set_status(StatusCode.OK)
        other.set_status(Status(StatusCode.ERROR, "ignored after OK"))
        other.end()
        other.set_attribute("after", "end")  # refused: ended


def _comparable(span: ReadableSpan) -> dict[str, Any]:
    data = json.loads(span_to_json_line(span))
    for key in ("context", "parent_id", "start_time", "end_time"):
        data.pop(key)
    for event in data["events"]:
        if event["name"] == "exception":
            event["timestamp"] = None
            attributes = event["attributes"]
            attributes["exception.stacktrace"] = attributes["exception.stacktrace"].splitlines()[-1]
    for link in data["links"]:
        link["context"] = None
    data["dropped"] = (span.dropped_attributes, span.dropped_events, span.dropped_links)
    return data


def test_direct_spans_equal_sdk_spans() -> None:
    direct_provider, direct_out = _provider(foreign=False)
    sdk_provider, sdk_out = _provider(foreign=True)
    _workload(direct_provider.get_tracer("t"))
    _workload(sdk_provider.get_tracer("t"))
    direct, sdk = direct_out.get_finished_spans(), sdk_out.get_finished_spans()
    assert all(isinstance(span, DirectSpan) for span in direct)
    assert not any(isinstance(span, DirectSpan) for span in sdk)
    assert [_comparable(s) for s in direct] == [_comparable(s) for s in sdk]
    for span in direct:  # the span files' path: the fields read at once
        assert span_fields_to_json_line(*span.line_fields()) == span.to_json(indent=None)
    by_name = {span.name: span for span in direct}
    assert by_name["child"].parent == by_name["parent-renamed"].context
    assert by_name["child"].status.status_code is StatusCode.ERROR
    assert by_name["child"].status.description == "ValueError: boom"
    assert by_name["parent-renamed"].dropped_attributes == 200 + 4 - 128
    assert by_name["linked"].status.status_code is StatusCode.OK
    assert "after" not in by_name["linked"].attributes


class _Stop(BaseException):
    """Not an Exception: use_span lets it through without recording it."""


def _current_span_workload(tracer: trace.Tracer) -> list[str]:
    """start_as_current_span in every form: what is current inside, exceptions, its options, and as
    a decorator of a sync and an async function. Returns the names seen as current."""
    seen: list[str] = []

    def current() -> None:
        seen.append(getattr(trace.get_current_span(), "name", "none"))

    with tracer.start_as_current_span("outer") as outer:
        current()
        with pytest.raises(KeyError), tracer.start_as_current_span("quiet", record_exception=False):
            current()
            raise KeyError("k")
        with (
            pytest.raises(KeyError),
            tracer.start_as_current_span("no-status", set_status_on_exception=False),
        ):
            raise KeyError("k")
        with pytest.raises(_Stop), tracer.start_as_current_span("stopped"):
            raise _Stop()
        with tracer.start_as_current_span("kept-open", end_on_exit=False) as open_span:
            current()
        current()
        open_span.end()
        outer.set_status(StatusCode.OK)

    @tracer.start_as_current_span("decorated", kind=SpanKind.CONSUMER, attributes={"d": "1"})
    def decorated(x: int) -> int:
        current()
        return x + 1

    assert decorated(1) == 2 and decorated(2) == 3  # a span per call

    @tracer.start_as_current_span("async-decorated")
    async def async_decorated() -> str:
        await asyncio.sleep(0)
        current()
        return "done"

    assert asyncio.run(async_decorated()) == "done"
    current()
    return seen


def test_start_as_current_span_is_the_sdks() -> None:
    ours, ours_out = _provider(foreign=False)
    sdk = TracerProvider()
    sdk_out = InMemorySpanExporter()
    sdk.add_span_processor(SimpleSpanProcessor(sdk_out))
    ours_seen = _current_span_workload(ours.get_tracer("t"))
    sdk_seen = _current_span_workload(sdk.get_tracer("t"))
    assert (
        ours_seen
        == sdk_seen
        == ["outer", "quiet", "kept-open", "outer", "decorated", "decorated", "async-decorated", "none"]
    )
    direct, plain = ours_out.get_finished_spans(), sdk_out.get_finished_spans()
    assert all(isinstance(span, DirectSpan) for span in direct)
    assert [_comparable(s) for s in direct] == [_comparable(s) for s in plain]
    by_name = {span.name: span for span in direct}
    assert by_name["quiet"].status.status_code is StatusCode.ERROR and not by_name["quiet"].events
    assert by_name["no-status"].status.status_code is StatusCode.UNSET and by_name["no-status"].events
    assert by_name["stopped"].status.status_code is StatusCode.UNSET
    assert by_name["kept-open"].end_time is not None  # ended by hand, after the block


def test_a_foreign_processor_gets_sdk_spans() -> None:
    provider, _ = _provider(foreign=False)
    tracer = provider.get_tracer("t")
    assert isinstance(tracer.start_span("before"), DirectSpan)
    foreign = ForeignProcessor()
    provider.add_span_processor(foreign)
    span = tracer.start_span("after")
    assert isinstance(span, SdkSpan) and foreign.started == [span]


@pytest.mark.parametrize(
    "parent",
    [
        None,
        SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])),
        SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(0), trace_state=TraceState([("k", "v")])),
        SpanContext(7, 9, is_remote=False, trace_flags=TraceFlags(1)),
        SpanContext(7, 9, is_remote=False, trace_flags=TraceFlags(0)),
        SpanContext(0, 0, is_remote=True),  # invalid: a root
    ],
)
def test_default_sampler_decided_as_the_sdk_decides(parent: SpanContext | None) -> None:
    provider, _ = _provider(foreign=False)
    tracer = provider.get_tracer("t")
    assert isinstance(tracer, SdkTracer) and tracer.sampler is DEFAULT_ON
    context = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
    attributes = {"a": "1"}
    _, span_context, ours = new_span_context(tracer, context, "s", SpanKind.CONSUMER, attributes, ())
    theirs = DEFAULT_ON.should_sample(context, span_context.trace_id, "s", SpanKind.CONSUMER, attributes, ())
    assert (ours.decision, dict(ours.attributes), ours.trace_state) == (
        theirs.decision,
        dict(theirs.attributes),
        theirs.trace_state,
    )
    assert span_context.trace_flags.sampled == (theirs.decision is Decision.RECORD_AND_SAMPLE)


@pytest.mark.parametrize(
    "limits", [SpanLimits(), SpanLimits(max_events=2), SpanLimits(max_attribute_length=3)], ids=str
)
def test_a_string_event_is_what_add_event_makes(limits: SpanLimits) -> None:
    """`add_string_event` (the executor's state events) makes what `add_event` makes, within the
    event limit, under an attribute length limit and once the span has ended."""
    made = []
    for add in ("add_event", "add_string_event"):
        provider = CachingTracerProvider(span_limits=limits)
        span = provider.get_tracer("t").start_span("s")
        assert type(span) is DirectSpan
        for i in range(3):
            getattr(span, add)(f"e{i}", {"ray.state": "RUNNING"}, 1_700_000_000_000_000_000 + i)
        span.end()
        getattr(span, add)("late", {"ray.state": "FINISHED"}, 1_700_000_001_000_000_000)  # refused
        made.append((json.loads(span.to_json(indent=None))["events"], span.dropped_events))
    assert made[0] == made[1]
    assert len(made[0][0]) == (2 if limits.max_events == 2 else 3)
