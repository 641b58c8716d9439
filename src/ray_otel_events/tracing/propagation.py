"""W3C trace context across processes through the global propagator, as Ray does with `_ray_trace_ctx`.

The carrier is a plain dict (`traceparent`, plus `tracestate`/`baggage` when set) that travels with
the task's arguments; `OTEL_PROPAGATORS` chooses the format, W3C TraceContext + Baggage by default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context, propagate


def inject_into(ctx: context.Context) -> dict[str, str]:
    """A given context (e.g. `trace.set_span_in_context(span)`) as a carrier dict."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return carrier


@contextmanager
def attached(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Run the block in the context the carrier describes (an empty context when there is none)."""
    ctx = propagate.extract(carrier) if carrier else context.Context()
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)
