"""The lineage mode: Ray's own events are the trace; a user's spans hang under them.

    ray.init(runtime_env={"worker_process_setup_hook": "ray_otel_events.tracing.lineage.setup"})
    ray_otel_events.tracing.lineage.setup()   # in the driver too: Ray runs the hook in workers only

No `--tracing-startup-hook`: Ray's tracing wrappers stay off (no `_ray_trace_ctx` argument, no span
per submission or execution). The task and actor-call spans are made from Ray's events by `serve` or
the bridge (otel/from_ray_events.py): trace = the job, span = the attempt, both derived from Ray's
ids. A span a user starts with no current span is made the child of the span those events give the
attempt running on this thread: the same derivation, fed by Ray's runtime context (session, the
task's job, task id, the core worker's current attempt number). In the driver it is the child of the
job's span, and linked to the caller's span when TRACEPARENT names one. Log records with no trace
context (`logging` and, in a worker, each printed line: tracing/task_logs.py) get the same ids.
Spans and log records go out as the OTLP hook's do: each written to the node's spool by the thread
that ends or emits it (Ray may kill a worker as soon as its job ends), sent over OTLP by the spool's
forwarder (tracing/spool.py, tracing/forwarder.py).
OTEL_EXPORTER_OTLP_ENDPOINT and the other standard variables say where.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.util._decorator import _agnosticcontextmanager
from opentelemetry.util.types import Attributes

from ray_otel_events.config import LineageConfig, SpoolConfig, TracingConfig
from ray_otel_events.events import ids
from ray_otel_events.otel.from_ray_events import job_span_id, task_span_id, trace_id_for_job
from ray_otel_events.tracing.install import install_tracing, run_setup_hook
from ray_otel_events.tracing.ray_session import RAY_WORKER_MODULE, connected_session_name
from ray_otel_events.tracing.setup_otlp_tracing import destination_key
from ray_otel_events.tracing.spool import (
    SpoolLogRecordProcessor,
    SpoolSpanProcessor,
    ensure_forwarder,
    spool_folder,
    unsent_bytes,
)

# Ray loads a worker_process_setup_hook named as a string by its last dot (`module.function`).
HOOK = "ray_otel_events.tracing.lineage.setup"
logger = logging.getLogger("ray_otel_events.tracing")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _int(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def attempt_span_context() -> tuple[SpanContext, bool] | None:
    """(the span Ray's events give what runs on this thread, whether it is the driver's job span):
    the attempt of the running task in a worker, the job in a driver; None outside Ray, between
    tasks, or before `ray.init`."""
    worker_module = sys.modules.get(RAY_WORKER_MODULE)
    worker = getattr(worker_module, "global_worker", None)
    core = getattr(worker, "core_worker", None)
    if core is None:
        return None
    session = connected_session_name()
    if not session:
        return None
    mode = getattr(worker, "mode", None)
    if mode == getattr(worker_module, "WORKER_MODE", 1):
        task = core.get_current_task_id()  # an async actor's call: Ray's own context variable
        if task.is_nil():
            return None
        task_id = task.binary()
        if ids.actor_of_task(task_id) != _actor_part(worker, task_id):
            return None  # a thread the task started: Ray gives it a made-up task id of its own
        attempt = core.get_current_task_attempt_number()
        trace_id = trace_id_for_job(session, ids.job_of_task(task_id))
        span_id = task_span_id(session, task_id, attempt)
        return SpanContext(_int(trace_id), _int(span_id), is_remote=True, trace_flags=_SAMPLED), False
    if mode == getattr(worker_module, "SCRIPT_MODE", 0):
        job = core.get_current_job_id().binary()
        trace_id, span_id = trace_id_for_job(session, job), job_span_id(session, job)
        return SpanContext(_int(trace_id), _int(span_id), is_remote=True, trace_flags=_SAMPLED), True
    return None


def _actor_part(worker: Any, task_id: bytes) -> bytes:
    """The actor part every task this worker runs has: its actor's id, or nil with the job's."""
    actor = getattr(worker, "actor_id", None)
    if actor is not None and not actor.is_nil():
        return bytes(actor.binary())
    return ids.nil_actor_id(ids.job_of_task(task_id))


Lineage = Callable[[], "tuple[SpanContext, bool] | None"]


class LineageTracer(trace.Tracer):
    """An SDK tracer whose spans started with no current span get Ray's lineage as their parent
    (and, in the driver, a link to the caller's span)."""

    def __init__(self, tracer: trace.Tracer, lineage: Lineage, caller_links: Sequence[Link]) -> None:
        self._tracer = tracer
        self._lineage = lineage
        self._caller_links = list(caller_links)

    def _parented(
        self, context: context_api.Context | None, links: Sequence[Link] | None
    ) -> tuple[context_api.Context | None, Sequence[Link] | None]:
        current = context if context is not None else context_api.get_current()
        if trace.get_current_span(current).get_span_context().is_valid:
            return context, links
        found = self._lineage()
        if found is None:
            return context, links
        parent, is_driver = found
        if is_driver and self._caller_links:
            links = [*(links or ()), *self._caller_links]
        return trace.set_span_in_context(NonRecordingSpan(parent), current), links

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        context, links = self._parented(context, links)
        return self._tracer.start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )

    @_agnosticcontextmanager  # as the SDK's: a context manager and a decorator
    def start_as_current_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class LineageTracerProvider(TracerProvider):
    """The SDK provider, its tracers LineageTracers."""

    def __init__(
        self, lineage: Lineage = attempt_span_context, caller_links: Sequence[Link] = (), **kwargs: Any
    ):
        super().__init__(**kwargs)
        self._lineage = lineage
        self._caller_links = list(caller_links)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        tracer = super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
        return LineageTracer(tracer, self._lineage, self._caller_links)


class LineageLogProcessor(LogRecordProcessor):
    """Gives a record with no trace context the span of what runs on this thread (put in front of
    the exporting processor: it changes the record before that one queues it)."""

    def __init__(self, lineage: Lineage = attempt_span_context) -> None:
        self._lineage = lineage

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        record = log_record.log_record
        if record.trace_id:
            return
        found = self._lineage()
        if found is not None:
            parent = found[0]
            record.trace_id, record.span_id, record.trace_flags = parent.trace_id, parent.span_id, _SAMPLED

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def caller_links(config: LineageConfig) -> list[Link]:
    if config.caller is None:
        return []
    trace_id, span_id, flags = config.caller
    return [Link(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags)))]


def setup() -> None:
    """Ray's `worker_process_setup_hook` (and the driver's own call): never raises."""
    run_setup_hook(HOOK, _install)


def _install() -> None:
    config = LineageConfig.from_env()
    resource = Resource.create()
    existing = trace.get_tracer_provider()
    if not isinstance(existing, TracerProvider):
        trace.set_tracer_provider(LineageTracerProvider(caller_links=caller_links(config), resource=resource))
    elif not isinstance(existing, LineageTracerProvider):
        logger.warning(
            "ray_otel_events: a tracer provider was set before the lineage mode's (%s): spans are"
            " exported but not parented by Ray's lineage (pid %d)",
            type(existing).__name__,
            os.getpid(),
        )
    tracing = TracingConfig(task_output=config.task_output, ray_wrappers=False, event_logs=False)
    folder = spool_folder(SpoolConfig.from_env().root, destination_key(tracing))
    spans = SpoolSpanProcessor(folder, resource, session_name=connected_session_name(), write_at_end=True)
    if unsent_bytes(folder):  # what an earlier job left; else the first span written starts it
        ensure_forwarder(folder)
    install_tracing(
        [spans],
        [LineageLogProcessor(), SpoolLogRecordProcessor(spans)],
        config=tracing,
        resource=resource,
        event_logs=False,  # Ray's events are the task spans' source: no second copy from here
    )
