"""The span processor that turns task and actor spans into RayEvents and OTel log records.

`on_start`/`on_end` only queue the span (a deque append); a background thread maps spans to events
(`otel.task_spans`) and hands each event to the sinks: a `RayEventRecorder`, which merges per
(entity id, event type) and exports to an aggregator exactly as for native events, and an
`EventLogEmitter`, which emits the event as an OTel log record carrying the span's trace and span
ids. `force_flush` maps everything queued on the calling thread (exit hooks use it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import NonRecordingSpan

from ray_otel_events.events.builders import EventFactory
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import semconv
from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.otel.task_spans import (
    EXECUTE,
    SUBMIT,
    SpanEvent,
    TaskSpanEvents,
    UnmappableSpan,
    task_role,
)
from ray_otel_events.producer.recorder import RayEventRecorder
from ray_otel_events.tracing.background import BatchingQueue, PromptFlusher

logger = logging.getLogger("ray_otel_events.tracing")

_STARTED = 0
_ENDED = 1
PRODUCER = semconv.TASK_EVENT_PRODUCER  # value of semconv.PRODUCER_ATTR on spans and records we handle


class EventSink(Protocol):
    """Where the events made from spans go; called from the processor's background thread.

    `prompt` is set when the batch holds the end of a task (or an actor's creation): a sink that
    buffers should pass it on soon rather than at its next tick, because a Ray actor is killed
    without exit hooks when its job ends. Each `SpanEvent` builds its RayEvent on first use of
    `.event`; a sink that needs none (the OTLP hook's records) reads its facts.
    """

    def consume(self, events: list[SpanEvent], prompt: bool) -> None: ...

    def flush(self, timeout_s: float) -> bool: ...


class RecorderSink:
    """Hands events to a RayEventRecorder, which merges, batches and exports them; prompt batches
    trigger an export now (coalesced to at most one per `prompt_interval_s`)."""

    def __init__(self, recorder: RayEventRecorder, *, prompt_interval_s: float = 0.1) -> None:
        self.recorder = recorder
        self.prompt = PromptFlusher(
            lambda: recorder.flush(recorder.config.rpc_timeout_s),
            name="ray_otel_events.prompt_export",
            min_interval_s=prompt_interval_s,
        )

    def consume(self, events: list[SpanEvent], prompt: bool) -> None:
        self.recorder.add_many(item.event for item in events)
        if prompt:
            self.prompt.request()

    def flush(self, timeout_s: float) -> bool:
        limit = self.recorder.config.shutdown_flush_timeout_ms / 1000
        return self.recorder.flush(min(timeout_s, limit))


class EventLogEmitter:
    """Emits each event as an OTel log record in the context of its span (trace and span ids set).

    `flush` (e.g. the logger provider's `force_flush`) is called soon after prompt batches,
    coalesced to at most one per `prompt_interval_s`; the provider's owner flushes it at exit.
    """

    def __init__(
        self,
        otel_logger: Logger,
        *,
        flush: Callable[[], object] | None = None,
        prompt_interval_s: float = 0.1,
    ) -> None:
        self.logger = otel_logger
        self.prompt = (
            None
            if flush is None
            else PromptFlusher(flush, name="ray_otel_events.prompt_logs", min_interval_s=prompt_interval_s)
        )

    def consume(self, events: list[SpanEvent], prompt: bool) -> None:
        now = time.time_ns()
        for item in events:
            fields = to_log_record(item.event)
            attributes = dict(fields.attributes)
            attributes[semconv.PRODUCER_ATTR] = PRODUCER
            self.logger.emit(
                timestamp=fields.timestamp_ns,
                observed_timestamp=now,
                context=trace.set_span_in_context(NonRecordingSpan(item.span_context), Context()),
                severity_number=SeverityNumber(fields.severity_number),
                severity_text=fields.severity_text or None,
                body=fields.body,
                attributes=attributes,
                event_name=fields.event_name,
            )
        if prompt and self.prompt is not None:
            self.prompt.request()

    def flush(self, timeout_s: float) -> bool:
        return True  # the logger provider is flushed by its owner


class TaskEventSpanProcessor(SpanProcessor):
    """Watches task/actor spans (Ray's and ours) and feeds the RayEvents they imply to sinks.

    Each task span it takes gets `ray_otel_events.producer = "task_event_span_processor"`: its
    events are on their way (as log records and/or to an aggregator), so a bridge that later sees
    the span must not turn it into events a second time.

    With `sync_task_end`, a task's execute span ending maps and flushes every sink (for a recorder:
    one AddEvents call) before the task returns. That costs a round trip per task, and is the only
    way a Ray actor's last calls are reported: Ray kills an actor without any exit hook when its
    job ends. Otherwise finished tasks are reported promptly, in the background.
    """

    accepts_direct_spans = True  # reads ended spans through ReadableSpan only

    def __init__(
        self,
        sinks: list[EventSink],
        *,
        factory: EventFactory | None = None,
        linger_s: float = 0.05,
        sync_task_end: bool = False,
        sync_timeout_s: float = 5.0,
    ) -> None:
        self.sinks = list(sinks)
        self.sync_task_end = sync_task_end
        self.sync_timeout_s = sync_timeout_s
        self.mapper = TaskSpanEvents(factory if factory is not None else EventFactory())
        self.counters = Counters("task_event_span_processor")
        self.queue: BatchingQueue[tuple[int, Any]] = BatchingQueue(
            self._handle, name="ray_otel_events.task_events", linger_s=linger_s
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        name = span.name
        if name.endswith(semconv.EXECUTE_SUFFIX):
            span.set_attribute(semconv.PRODUCER_ATTR, PRODUCER)
            self.queue.append((_STARTED, span))
        elif name.endswith(semconv.SUBMIT_SUFFIX):
            span.set_attribute(semconv.PRODUCER_ATTR, PRODUCER)

    def on_end(self, span: ReadableSpan) -> None:
        name = span.name
        if name.endswith(semconv.EXECUTE_SUFFIX):
            self.queue.append((_ENDED, span), urgent=True)  # a finished task: report it promptly
            if self.sync_task_end:
                self.force_flush(int(self.sync_timeout_s * 1000))
        elif name.endswith(semconv.SUBMIT_SUFFIX):
            self.queue.append((_ENDED, span))

    def _handle(self, batch: list[tuple[int, Any]]) -> None:
        events: list[SpanEvent] = []
        mapper = self.mapper
        prompt = False
        mapped: dict[tuple[str, int], int] = {}  # (role, phase): spans, counted once a batch
        for phase, span in batch:
            try:
                produced = mapper.started(span) if phase == _STARTED else mapper.ended(span)
            except UnmappableSpan as exc:
                self.counters.add("unmapped_spans", 1)
                logger.debug("ray_otel_events: span %r not mapped: %s", span.name, exc)
                continue
            if produced:
                role = task_role(span) or ""
                prompt = prompt or (role == EXECUTE and phase == _ENDED)
                mapped[role, phase] = mapped.get((role, phase), 0) + 1
                events.extend(produced)
        for (role, phase), spans in mapped.items():
            self.counters.add("mapped_spans", spans, role=role, phase="start" if phase == _STARTED else "end")
        if not events:
            return
        self.counters.add("events", len(events))
        for sink in self.sinks:
            try:
                sink.consume(events, prompt)
            except Exception:
                self.counters.add("sink_errors", 1, sink=type(sink).__name__)
                logger.exception("ray_otel_events: event sink %s failed", type(sink).__name__)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.queue.flush()
        ok = True
        for sink in self.sinks:
            ok = sink.flush(timeout_millis / 1000) and ok
        return ok

    def shutdown(self) -> None:
        self.queue.close()

    def stats(self) -> dict[str, Any]:
        c = self.counters
        return {
            "mapped_spans": c.get("mapped_spans"),
            "submit_spans": c.get("mapped_spans", role=SUBMIT, phase="end"),
            "execute_spans": c.get("mapped_spans", role=EXECUTE, phase="end"),
            "unmapped_spans": c.get("unmapped_spans"),
            "events": c.get("events"),
            "sink_errors": c.get("sink_errors"),
            "pending": self.queue.pending(),
        }
