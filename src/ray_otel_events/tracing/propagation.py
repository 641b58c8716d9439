"""W3C trace context across processes through the global propagator, as Ray does with `_ray_trace_ctx`.

The carrier is a plain dict (`traceparent`, plus `tracestate`/`baggage` when set) that travels with
the task's arguments; `OTEL_PROPAGATORS` chooses the format, W3C TraceContext + Baggage by default.
With that default and nothing but a trace context to carry (no baggage, no trace state), the
header is written and read here directly: the SDK's propagators spend a noticeable share of a
traced task injecting and extracting it (a regex search, four group calls, two propagators'
getters). Anything else goes through the global propagator.

Ray's own wrappers call the global propagator (`propagate.inject` / `propagate.extract`) on every
submission and execution, so our installation replaces the SDK's default one, and only that one,
with `W3CPropagator`: the same two propagators in the same order, with the same direct paths in
front (Ray's execution wrapper extracted through a regex search and two propagators' getters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators import textmap
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

TRACEPARENT = "traceparent"
# What our inject writes (version 00, lowercase hex): anything else is left to the propagator.
_CANONICAL_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACE_CONTEXT = TraceContextTextMapPropagator
_W3C_TYPES = {_TRACE_CONTEXT, W3CBaggagePropagator}
_checked: tuple[TextMapPropagator | None, bool] = (None, False)


def _w3c_default() -> bool:
    """True while the global propagator is W3C trace context (+ baggage): checked once per object."""
    global _checked
    global_textmap = propagate.get_global_textmap()
    if _checked[0] is not global_textmap:
        members = (
            global_textmap._propagators
            if isinstance(global_textmap, CompositePropagator)
            and type(global_textmap) in (CompositePropagator, W3CPropagator)
            else [global_textmap]
        )
        kinds = {type(member) for member in members}
        _checked = (global_textmap, TraceContextTextMapPropagator in kinds and kinds <= _W3C_TYPES)
    return _checked[1]


def _sdk_default(propagator: TextMapPropagator) -> bool:
    """True for the SDK's default global propagator: W3C trace context, then baggage."""
    if type(propagator) is not CompositePropagator:
        return False
    return [type(member) for member in propagator._propagators] == [_TRACE_CONTEXT, W3CBaggagePropagator]


class W3CPropagator(CompositePropagator):
    """The SDK's default propagator (W3C trace context, then baggage), with a trace context alone
    written and read directly; anything else (another setter or getter, an invalid span, a carrier
    with more than a canonical `traceparent`) goes through the two propagators as before. The
    result is theirs: the same carrier keys in the same order, the same context."""

    def __init__(self) -> None:
        super().__init__([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
        self._trace_context, self._baggage = self._propagators

    def inject(
        self,
        carrier: textmap.CarrierT,
        context: Context | None = None,
        setter: textmap.Setter[textmap.CarrierT] = textmap.default_setter,
    ) -> None:
        span_context = trace.get_current_span(context).get_span_context()
        if setter is not textmap.default_setter or not span_context.is_valid or span_context.trace_state:
            super().inject(carrier, context, setter)
            return
        carrier[TRACEPARENT] = _traceparent(span_context)  # type: ignore[index]  # as default_setter
        if baggage.get_all(context):
            self._baggage.inject(carrier, context, setter)

    def extract(
        self,
        carrier: textmap.CarrierT,
        context: Context | None = None,
        getter: textmap.Getter[textmap.CarrierT] = textmap.default_getter,
    ) -> Context:
        if (
            getter is textmap.default_getter
            and type(carrier) is dict
            and len(cast(dict[str, object], carrier)) == 1
        ):
            parent = _parent_of(cast(dict[str, object], carrier).get(TRACEPARENT))
            if parent is not None:
                base = context if context is not None else Context()
                return trace.set_span_in_context(NonRecordingSpan(parent), base) if parent.is_valid else base
        return super().extract(carrier, context, getter)


def install_w3c_propagator() -> None:
    """Replace the global propagator with `W3CPropagator` if it is the SDK's default, else leave it."""
    if _sdk_default(propagate.get_global_textmap()):
        propagate.set_global_textmap(W3CPropagator())


def _traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def _parent_of(header: object) -> SpanContext | None:
    """The remote span context of a canonical `traceparent` (an invalid one for all-zero ids, which
    carry nothing), or None for any other header, left to the propagator."""
    match = _CANONICAL_TRACEPARENT.fullmatch(header) if type(header) is str else None
    if match is None:
        return None
    trace_hex, span_hex, flags_hex = match.groups()
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not (trace_id and span_id):
        return trace.INVALID_SPAN_CONTEXT
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(flags_hex, 16)))


def inject_into(ctx: context.Context) -> dict[str, str]:
    """A given context (e.g. `trace.set_span_in_context(span)`) as a carrier dict."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return carrier


def carrier_of(span_context: SpanContext, base: context.Context | None = None) -> dict[str, str]:
    """The carrier of a span with this context, started in `base` (the current context if None):
    what `inject_into(trace.set_span_in_context(NonRecordingSpan(span_context), base))` returns."""
    ctx = span_context
    if ctx.is_valid and not ctx.trace_state and _w3c_default() and not baggage.get_all(base):
        return {TRACEPARENT: _traceparent(ctx)}
    return inject_into(trace.set_span_in_context(NonRecordingSpan(ctx), base))


# A trace context as it travels with a pool task: (trace id, span id, flags) when the carrier would be
# a canonical `traceparent` alone (smaller to pickle than the header, and read without parsing it),
# else the carrier itself.
Travelling = tuple[int, int, int] | dict[str, str]


def travelling_context(span_context: SpanContext, base: context.Context | None = None) -> Travelling:
    """What `carrier_of(span_context, base)` carries, in its travelling form (`Travelling`)."""
    ctx = span_context
    trace_state = ctx.trace_state
    if (
        ctx.is_valid
        and (trace_state is DEFAULT_TRACE_STATE or not trace_state)
        and _w3c_default()
        and not baggage.get_all(base)
    ):
        return (ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
    return carrier_of(ctx, base)


def arrived_context(travelled: Travelling) -> tuple[context.Context, SpanContext | None]:
    """The context a travelling one describes, on an empty context (what `extract_from` returns for
    the carrier it stands for), and its span's context when that is valid."""
    if type(travelled) is tuple:
        trace_id, span_id, flags = travelled
        parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
        if _w3c_default():
            return trace.set_span_in_context(NonRecordingSpan(parent), context.Context()), parent
        travelled = {TRACEPARENT: _traceparent(parent)}  # for the propagator this process has
    extracted = extract_from(cast(dict[str, str], travelled))
    found = trace.get_current_span(extracted).get_span_context()
    return extracted, found if found.is_valid else None


def extract_from(carrier: Mapping[str, str] | None) -> context.Context:
    """The context a carrier describes, on an empty context: what `propagate.extract(carrier)` returns."""
    if not carrier:
        return context.Context()
    if len(carrier) == 1 and _w3c_default():
        parent = _parent_of(carrier.get(TRACEPARENT))
        if parent is not None:
            if not parent.is_valid:
                return context.Context()  # as the propagator: an all-zero id carries nothing
            return trace.set_span_in_context(NonRecordingSpan(parent), context.Context())
    return propagate.extract(carrier)
