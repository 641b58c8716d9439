"""Our direct W3C header path gives what the global propagator gives, and steps aside when it can't."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, context, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators import textmap
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ray_otel_events.tracing.propagation import (
    W3CPropagator,
    arrived_context,
    carrier_of,
    extract_from,
    install_w3c_propagator,
    travelling_context,
)
from tests.helpers.examples import examples

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


_TRAVELLING_CASES = [
    SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1)),
    SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(0)),
    SpanContext(1, 1, False, TraceFlags(3)),
    SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1), TraceState([("k", "v")])),
    SpanContext(0, 0, False),
]


def _arrives_as_carried(span_context: SpanContext, base: context.Context | None = None) -> None:
    """A pool task's travelling context arrives as the carrier of the same span would."""
    travelled = travelling_context(span_context, base)
    (ours, parent), theirs = arrived_context(travelled), extract_from(carrier_of(span_context, base))
    assert parent == (_span_context(theirs) if _span_context(theirs).is_valid else None)
    assert _span_context(ours) == _span_context(theirs)
    assert _span_context(ours).is_remote == _span_context(theirs).is_remote
    assert _span_context(ours).trace_state == _span_context(theirs).trace_state
    assert baggage.get_all(ours) == baggage.get_all(theirs)


@pytest.mark.parametrize("span_context", _TRAVELLING_CASES)
def test_travelling_context_arrives_as_the_carrier_would(span_context: SpanContext) -> None:
    _arrives_as_carried(span_context)
    if span_context == _TRAVELLING_CASES[0]:  # the common case travels as three ints, no header
        assert travelling_context(span_context) == (TRACE_ID, SPAN_ID, 1)


def test_travelling_context_keeps_baggage() -> None:
    base = baggage.set_baggage("tenant", "a b", context.Context())
    span_context = SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1))
    assert isinstance(travelling_context(span_context, base), dict)  # a carrier, baggage and all
    _arrives_as_carried(span_context, base)


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
    travelled = travelling_context(span_context)
    assert travelled == carrier  # not W3C's own: the carrier travels, through the same propagator
    assert not _span_context(arrived_context(travelled)[0]).is_valid
    # Ints sent by a W3C submitter reach a worker whose propagator is another: through that one.
    header = {"traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"}
    assert _span_context(arrived_context((TRACE_ID, SPAN_ID, 1))[0]) == _span_context(
        propagate.extract(header)
    )


# -- W3CPropagator: the SDK's default, with the common case written out ---------------------------

_SDK_DEFAULT = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_hex = st.text(alphabet="0123456789abcdefABCDEF", min_size=0, max_size=34)
_traceparents = st.one_of(
    st.builds(
        lambda version, trace_id, span_id, flags, tail: f"{version}-{trace_id}-{span_id}-{flags}{tail}",
        st.sampled_from(["00", "01", "ff", "0"]),
        st.sampled_from(["cecd7403d5aacd5cd39da423c2fbde3b", "0" * 32, "CECD7403D5AACD5CD39DA423C2FBDE3B"])
        | _hex,
        st.sampled_from(["74949627eb922871", "0" * 16]) | _hex,
        st.sampled_from(["01", "00", "ff", "1"]),
        st.sampled_from(["", "-", "-x", " ", "\t"]),
    ),
    st.text(max_size=60),
)
_carriers = st.fixed_dictionaries(
    {"traceparent": _traceparents},
    optional={
        "tracestate": st.sampled_from(["k=v", "a=1,b=2", "bad state"]),
        "baggage": st.sampled_from(["tenant=a", "a=1,b=%20x", "=bad"]),
        "other": st.just("x"),
    },
)
_base_contexts = st.sampled_from(
    [
        None,
        context.Context(),
        baggage.set_baggage("tenant", "z", context.Context()),
        trace.set_span_in_context(NonRecordingSpan(SpanContext(5, 6, False, TraceFlags(1)))),
    ]
)


def _same_context(ours: context.Context, theirs: context.Context) -> None:
    assert _span_context(ours) == _span_context(theirs)
    assert _span_context(ours).trace_state == _span_context(theirs).trace_state
    assert baggage.get_all(ours) == baggage.get_all(theirs)
    assert set(ours) == set(theirs)


@settings(max_examples=examples(500), deadline=None)
@given(
    _carriers | st.dictionaries(st.sampled_from(["traceparent", "x"]), st.text(max_size=5), max_size=2),
    _base_contexts,
)
def test_w3c_propagator_extracts_what_the_sdks_default_extracts(
    carrier: dict[str, str], base: context.Context | None
) -> None:
    _same_context(W3CPropagator().extract(carrier, base), _SDK_DEFAULT.extract(carrier, base))


_span_contexts = st.builds(
    SpanContext,
    st.sampled_from([0, 1, TRACE_ID, 2**128 - 1]),
    st.sampled_from([0, 1, SPAN_ID, 2**64 - 1]),
    st.booleans(),
    st.sampled_from([TraceFlags(0), TraceFlags(1), TraceFlags(3)]),
    st.sampled_from([TraceState(), TraceState([("k", "v")])]),
)


@settings(max_examples=examples(300), deadline=None)
@given(_span_contexts, st.sampled_from([{}, {"tenant": "a b"}, {"k": "1", "j": "x=y"}]), st.booleans())
def test_w3c_propagator_injects_what_the_sdks_default_injects(
    span_context: SpanContext, entries: dict[str, str], current: bool
) -> None:
    ctx = context.Context()
    for key, value in entries.items():
        ctx = baggage.set_baggage(key, value, ctx)
    ctx = trace.set_span_in_context(NonRecordingSpan(span_context), ctx)
    ours: dict[str, str] = {}
    theirs: dict[str, str] = {}
    if current:  # the current context, as Ray's wrapper injects
        token = context.attach(ctx)
        try:
            W3CPropagator().inject(ours)
            _SDK_DEFAULT.inject(theirs)
        finally:
            context.detach(token)
    else:
        W3CPropagator().inject(ours, ctx)
        _SDK_DEFAULT.inject(theirs, ctx)
    assert list(ours.items()) == list(theirs.items())  # the same keys, in the same order
    assert W3CPropagator().fields == _SDK_DEFAULT.fields


def test_w3c_propagator_uses_other_setters_and_getters_as_the_sdks_default() -> None:
    class Listing(textmap.Setter[list[tuple[str, str]]], textmap.Getter[list[tuple[str, str]]]):
        def set(self, carrier: list[tuple[str, str]], key: str, value: str) -> None:
            carrier.append((key, value))

        def get(self, carrier: list[tuple[str, str]], key: str) -> list[str] | None:
            found = [value for name, value in carrier if name == key]
            return found or None

        def keys(self, carrier: list[tuple[str, str]]) -> list[str]:
            return [name for name, _ in carrier]

    ctx = trace.set_span_in_context(NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1))))
    ours: list[tuple[str, str]] = []
    theirs: list[tuple[str, str]] = []
    W3CPropagator().inject(ours, ctx, setter=Listing())
    _SDK_DEFAULT.inject(theirs, ctx, setter=Listing())
    assert ours == theirs == [("traceparent", f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01")]
    _same_context(
        W3CPropagator().extract(ours, getter=Listing()), _SDK_DEFAULT.extract(theirs, getter=Listing())
    )


def test_only_the_sdks_default_propagator_is_replaced() -> None:
    saved = propagate.get_global_textmap()
    try:
        propagate.set_global_textmap(
            CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
        )
        install_w3c_propagator()
        assert type(propagate.get_global_textmap()) is W3CPropagator
        for other in (
            CompositePropagator([W3CBaggagePropagator(), TraceContextTextMapPropagator()]),  # another order
            CompositePropagator([TraceContextTextMapPropagator()]),
            TraceContextTextMapPropagator(),
        ):
            propagate.set_global_textmap(other)
            install_w3c_propagator()
            assert propagate.get_global_textmap() is other
    finally:
        propagate.set_global_textmap(saved)


def test_the_direct_paths_still_apply_under_w3c_propagator() -> None:
    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(W3CPropagator())
    try:
        span_context = SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1))
        carrier = carrier_of(span_context)
        assert carrier == {"traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"}
        assert _span_context(extract_from(carrier)) == SpanContext(TRACE_ID, SPAN_ID, True, TraceFlags(1))
    finally:
        propagate.set_global_textmap(saved)
