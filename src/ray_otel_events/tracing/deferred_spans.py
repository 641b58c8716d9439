"""Submission spans recorded off the submitting thread: ids now, the SDK span a moment later.

A PRODUCER span for one task submission starts and ends inside `submit()`, and only its context is
needed there (it travels with the call). Creating it with the SDK costs more than the submission
itself (ids, sampler, attribute cleaning, a ReadableSpan copy, every processor), so when the
provider is ours `record_submit_span` does only what the carrier needs: it chooses the ids, asks
the provider's sampler (the SDK's own built-in samplers are deterministic, so the later call agrees),
reads the clock at start and end, and queues the rest. A background thread then creates the same
span with the captured parent context and the recorded times, so processors and exporters see an
ordinary span: a DirectSpan made from the ids, parent and sampling already chosen when the tracer
makes them, else an SDK span given those ids (`PresetIdGenerator`). Anything else (a provider a
user installed, a custom sampler) gets the span created synchronously, as before.

The queue is flushed before the providers are (`TracingInstallation.flush`), at exit included.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision
from opentelemetry.trace import SpanContext, SpanKind
from opentelemetry.util.types import Attributes

from ray_otel_events.tracing.background import BatchingQueue
from ray_otel_events.tracing.direct_spans import DirectTracer, new_span_context
from ray_otel_events.tracing.files import SpanFileProcessor
from ray_otel_events.tracing.spool import SpoolSpanProcessor

logger = logging.getLogger("ray_otel_events.tracing")

_SDK_SAMPLERS_MODULE = "opentelemetry.sdk.trace.sampling"
C = TypeVar("C")  # the form a carrier is returned in
Encode = Callable[[SpanContext, context_api.Context | None], C]  # (span context, context it started in)


_getrandbits = random.getrandbits


class PresetIdGenerator(RandomIdGenerator):
    """Random ids, except for the next span created on the thread that has preset them.

    Random ids are drawn as `RandomIdGenerator` draws them (the `random` module's generator, never
    the invalid 0) without its method calls, and the preset is one attribute read at once (its
    thread and ids), not a thread-local: every traced task asks for two or three ids, on threads
    that never preset. One preset at a time: `DeferredSpans` sets them under its queue's lock."""

    def __init__(self) -> None:
        self._preset: tuple[int, int, int] | None = None  # (thread ident, trace id, span id)

    @contextmanager
    def preset(self, trace_id: int, span_id: int) -> Iterator[None]:
        """The next span created on this thread in the block gets these ids (trace id if it is a root)."""
        self._preset = (threading.get_ident(), trace_id, span_id)
        try:
            yield
        finally:
            self._preset = None

    def generate_trace_id(self) -> int:
        preset = self._preset
        if preset is not None and preset[0] == threading.get_ident():
            return int(preset[1])
        trace_id = _getrandbits(128)
        while not trace_id:
            trace_id = _getrandbits(128)
        return trace_id

    def generate_span_id(self) -> int:
        preset = self._preset
        if preset is not None and preset[0] == threading.get_ident():
            self._preset = None  # the trace id is asked first (roots only), the span id last
            return int(preset[2])
        span_id = _getrandbits(64)
        while not span_id:
            span_id = _getrandbits(64)
        return span_id


class _Submission(NamedTuple):
    tracer: SdkTracer
    name: str
    parent: context_api.Context
    parent_span: SpanContext | None
    span_context: SpanContext
    attributes: Attributes
    sampled_attributes: Attributes
    start_ns: int
    end_ns: int


class DeferredSpans:
    """Creates queued submission spans through the SDK on a background thread (see the module doc)."""

    def __init__(self, *, linger_s: float = 0.05) -> None:
        self.id_generator = PresetIdGenerator()
        self.created = 0
        self.mismatched = 0
        self._deferrable: tuple[trace.Tracer, Any] | None = None  # (tracer, its sampler): can_defer
        self.queue: BatchingQueue[_Submission] = BatchingQueue(
            self._create, name="ray_otel_events.deferred_spans", linger_s=linger_s
        )

    def can_defer(self, tracer: trace.Tracer) -> bool:
        """True for a tracer of the provider using our ids, with one of the SDK's own samplers. The
        last tracer found so, with its sampler then, is kept: a submitter asks with one tracer, and
        the answer changes only with the sampler (`provider.replace_sampler`)."""
        known = self._deferrable
        if known is not None and known[0] is tracer and known[1] is getattr(tracer, "sampler", None):
            return True
        if (
            isinstance(tracer, SdkTracer)
            and tracer.id_generator is self.id_generator
            and type(tracer.sampler).__module__ == _SDK_SAMPLERS_MODULE
        ):
            self._deferrable = (tracer, tracer.sampler)
            return True
        return False

    def record(self, tracer: SdkTracer, name: str, attributes: Attributes, encode: Encode[C]) -> C:
        """The carrier of a PRODUCER span starting and ending now, in `encode`'s form (`encode(span
        context, context it started in)`: `propagation.carrier_of` for a W3C carrier); the span
        itself follows."""
        start_ns = time.time_ns()
        parent_ctx = context_api.get_current()
        kind = SpanKind.PRODUCER
        parent, span_context, sampling = new_span_context(tracer, parent_ctx, name, kind, attributes, ())
        carrier = encode(span_context, parent_ctx)
        if sampling.decision is not Decision.DROP:
            self.queue.append(
                _Submission(
                    tracer,
                    name,
                    parent_ctx,
                    parent,
                    span_context,
                    attributes,
                    # The default sampler's are the given ones (a view of them, {} for None).
                    (attributes or {}) if tracer.sampler is DEFAULT_ON else sampling.attributes,
                    start_ns,
                    time.time_ns(),
                )
            )
        return carrier

    def flush(self) -> None:
        self.queue.flush()

    def _create(self, batch: list[_Submission]) -> None:
        preset = self.id_generator.preset
        lines: list[Any] = []  # submission lines made without their spans, for `lines_to`
        lines_to: SpanFileProcessor | SpoolSpanProcessor | None = None
        last_tracer: SdkTracer | None = None
        direct: DirectTracer | None = None
        files: SpanProcessor | None = None
        try:
            for item in batch:
                tracer = item.tracer
                if tracer is not last_tracer:  # a batch mostly comes from one tracer: asked once
                    last_tracer = tracer
                    direct = tracer if isinstance(tracer, DirectTracer) and tracer.direct() else None
                    files = direct.sole_processor() if direct is not None else None
                attributes = item.sampled_attributes
                # Only our span files or spool would read the span (a hook without event
                # processors) and they write its attributes as given: its line is written from the
                # item, and no span is made.
                if (
                    direct is not None
                    and (type(files) is SpanFileProcessor or type(files) is SpoolSpanProcessor)
                    and (not attributes or direct.keeps_as_given(attributes))
                ):
                    if item.span_context.trace_flags.sampled:
                        if files is not lines_to:
                            _write_lines(lines_to, lines)
                            lines, lines_to = [], files
                        lines.append(
                            files.submission_line(
                                item.name,
                                item.span_context,
                                item.parent_span,
                                item.start_ns,
                                item.end_ns,
                                attributes,
                                direct,
                            )
                        )
                    self.created += 1
                    continue
                _write_lines(lines_to, lines)  # before a span is made: the lines keep the spans' order
                lines = []
                if direct is not None:
                    # Ids, parent and sampling were chosen at submission: the span is made from them.
                    direct.started_span(
                        item.name,
                        item.span_context,
                        item.parent_span,
                        SpanKind.PRODUCER,
                        attributes,
                        (),
                        item.start_ns,
                        item.parent,
                    ).end(end_time=item.end_ns)
                    self.created += 1
                    continue
                with preset(item.span_context.trace_id, item.span_context.span_id):
                    span = item.tracer.start_span(
                        item.name,
                        context=item.parent,
                        kind=SpanKind.PRODUCER,
                        attributes=item.attributes,
                        start_time=item.start_ns,
                    )
                span.end(end_time=item.end_ns)
                self.created += 1
                if span.get_span_context() != item.span_context:
                    self.mismatched += 1
                    if self.mismatched == 1:
                        logger.warning(
                            "ray_otel_events: a deferred span came out as %s, not the %s already propagated",
                            span.get_span_context(),
                            item.span_context,
                        )
        finally:  # what was made before a failure is still written
            _write_lines(lines_to, lines)


def _write_lines(files: SpanFileProcessor | SpoolSpanProcessor | None, lines: list[Any]) -> None:
    if files is not None and lines:
        files.write_lines(lines)  # one write(2) a batch, on this thread: no hand-over to the writer's


def record_submit_span(
    tracer: trace.Tracer, name: str, attributes: Attributes, deferred: DeferredSpans | None, encode: Encode[C]
) -> C:
    """A PRODUCER span covering this instant; returns the carrier of its context in `encode`'s form
    (`propagation.carrier_of`: the W3C carrier; `propagation.travelling_context`: a pool task's).

    Deferred when `deferred` can take this tracer, created synchronously otherwise.
    """
    if deferred is not None and deferred.can_defer(tracer):
        return deferred.record(tracer, name, attributes, encode)  # type: ignore[arg-type]
    span = tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
    carrier = encode(span.get_span_context(), context_api.get_current())
    span.end()
    return carrier
