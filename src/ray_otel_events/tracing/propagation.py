"""W3C trace context across processes through the global propagator, as Ray does with `_ray_trace_ctx`.

The carrier is a plain dict (`traceparent`, plus `tracestate`/`baggage` when set) that travels with
the task's arguments; `OTEL_PROPAGATORS` chooses the format, W3C TraceContext + Baggage by default.
With that default and nothing but a trace context to carry (no baggage, no trace state), the
header is written and read here directly: the SDK's propagators cost 4 µs to inject and 6 µs to
extract it (a regex search, four group calls, two propagators' getters), a tenth of a traced
task. Anything else goes through the global propagator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
# What our inject writes (version 00, lowercase hex): anything else is left to the propagator.
_CANONICAL_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_W3C_TYPES = {TraceContextTextMapPropagator, W3CBaggagePropagator}
_checked: tuple[TextMapPropagator | None, bool] = (None, False)


def _w3c_default() -> bool:
    """True while the global propagator is W3C trace context (+ baggage): checked once per object."""
    global _checked
    textmap = propagate.get_global_textmap()
    if _checked[0] is not textmap:
        members = textmap._propagators if type(textmap) is CompositePropagator else [textmap]
        kinds = {type(member) for member in members}
        _checked = (textmap, TraceContextTextMapPropagator in kinds and kinds <= _W3C_TYPES)
    return _checked[1]


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
        return {TRACEPARENT: f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"}
    return inject_into(trace.set_span_in_context(NonRecordingSpan(ctx), base))


def extract_from(carrier: Mapping[str, str] | None) -> context.Context:
    """The context a carrier describes, on an empty context: what `propagate.extract(carrier)` returns."""
    if not carrier:
        return context.Context()
    if len(carrier) == 1 and _w3c_default():
        header = carrier.get(TRACEPARENT)
        match = _CANONICAL_TRACEPARENT.fullmatch(header) if type(header) is str else None
        if match is not None:
            trace_hex, span_hex, flags_hex = match.groups()
            trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
            if not (trace_id and span_id):
                return context.Context()  # as the propagator: an all-zero id carries nothing
            parent = SpanContext(
                trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(flags_hex, 16))
            )
            return trace.set_span_in_context(NonRecordingSpan(parent), context.Context())
    return propagate.extract(carrier)
