"""Our direct W3C header path gives what the global propagator gives, and steps aside when it can't."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, context, propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ray_otel_events.tracing.propagation import carrier_of, extract_from

TRACE_ID = 0xCECD7403D5AACD5CD39DA423C2FBDE3B
SPAN_ID = 0x74949627EB922871


def _span_context(ctx: context.Context) -> SpanContext:
    return trace.get_current_span(ctx).get_span_context()


@pytest.mark.parametrize(
    "span_context",
    [
        SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1)),
        SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(0)),
        SpanContext(1, 1, False, TraceFlags(3)),
        SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1), TraceState([("k", "v")])),
        SpanContext(0, 0, False),  # invalid: nothing to carry
    ],
)
def test_carrier_equals_the_propagators(span_context: SpanContext) -> None:
    expected: dict[str, str] = {}
    propagate.inject(expected, context=trace.set_span_in_context(NonRecordingSpan(span_context)))
    assert carrier_of(span_context) == expected


def test_carrier_keeps_baggage_of_the_base_context() -> None:
    span_context = SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1))
    base = baggage.set_baggage("tenant", "a b", context.Context())
    expected: dict[str, str] = {}
    propagate.inject(expected, context=trace.set_span_in_context(NonRecordingSpan(span_context), base))
    assert "baggage" in expected
    assert carrier_of(span_context, base) == expected


@pytest.mark.parametrize(
    "carrier",
    [
        {"traceparent": "00-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01"},
        {"traceparent": "00-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-00"},
        {"traceparent": "00-00000000000000000000000000000000-74949627eb922871-01"},
        {"traceparent": "00-cecd7403d5aacd5cd39da423c2fbde3b-0000000000000000-01"},
        {"traceparent": "00-CECD7403D5AACD5CD39DA423C2FBDE3B-74949627eb922871-01"},
        {"traceparent": "ff-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01"},
        {"traceparent": "01-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01-extra"},
        {"traceparent": " 00-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01"},
        {"traceparent": "00-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01-"},
        {"traceparent": "garbage"},
        {"traceparent": ""},
        {
            "traceparent": "00-cecd7403d5aacd5cd39da423c2fbde3b-74949627eb922871-01",
            "tracestate": "k=v",
            "baggage": "tenant=a",
        },
        {"other": "x"},
        {},
    ],
)
def test_extract_equals_the_propagators(carrier: dict[str, str]) -> None:
    ours, theirs = extract_from(carrier), propagate.extract(carrier)
    assert _span_context(ours) == _span_context(theirs)
    assert _span_context(ours).trace_state == _span_context(theirs).trace_state
    assert baggage.get_all(ours) == baggage.get_all(theirs)


@pytest.fixture
def b3_like_propagator() -> Iterator[None]:
    """A global propagator that is not W3C: our direct path must step aside."""

    class Upper(TraceContextTextMapPropagator):
        def inject(self, carrier, context=None, setter=None):  # type: ignore[no-untyped-def]
            super().inject(carrier, context)
            carrier["traceparent"] = carrier["traceparent"].upper()

    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([Upper()]))
    try:
        yield
    finally:
        propagate.set_global_textmap(saved)


@pytest.mark.usefixtures("b3_like_propagator")
def test_another_global_propagator_is_used_as_it_is() -> None:
    span_context = SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1))
    carrier = carrier_of(span_context)
    assert carrier["traceparent"] == "00-CECD7403D5AACD5CD39DA423C2FBDE3B-74949627EB922871-01"
    # The SDK's W3C extract rejects the uppercase header; so must we, through the same propagator.
    assert not _span_context(extract_from(carrier)).is_valid
