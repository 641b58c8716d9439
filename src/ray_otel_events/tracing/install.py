"""One tracing installation per process: providers, the event side, and flushing at exit.

`install_tracing` is the building block both bundled hooks use, and a user's own hook can too: give
it the span processors (where spans go) and log record processors (where task logs, and event log
records when `event_logs`, go); it adds the task-event processor in front (spans -> RayEvents ->
recorder and log records), sets the global providers (and, in place of the SDK's default
propagator, the same W3C one with its common case written out: tracing/propagation.py), in a Ray
process gives Ray's tracing wrappers cheaper helpers with the same results (tracing/ray_wrappers.py),
puts an OTel handler on the root logger (so `logging` in a task carries its span's context), in a Ray
worker makes each line its tasks print a log record too (tracing/task_logs.py), and makes sure
everything is flushed when the process ends, including a multiprocessing child ending with
`os._exit` (atexit does not run there; multiprocessing's own finalizers do).

Once per process: a second call returns the existing installation. A forked child inherits its
parent's installation; every component re-initialises itself after fork (own files, own queues,
own gRPC channel), and the first call in the child adopts it: restarts the recorder thread and
registers the child's exit flush.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry import _logs, trace
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from ray_otel_events.config import RecorderConfig, TracingConfig
from ray_otel_events.events.builders import EventFactory
from ray_otel_events.events.ray_releases import CORE_WORKER_RAY_EVENTS
from ray_otel_events.otel import semconv
from ray_otel_events.producer.recorder import RayEventRecorder
from ray_otel_events.tracing.deferred_spans import DeferredSpans
from ray_otel_events.tracing.propagation import install_w3c_propagator
from ray_otel_events.tracing.provider import CachingTracerProvider
from ray_otel_events.tracing.ray_session import connected_session_name, with_ray_session
from ray_otel_events.tracing.report import report_setup_failure
from ray_otel_events.tracing.task_events import (
    EventLogEmitter,
    EventSink,
    RecorderSink,
    TaskEventSpanProcessor,
)
from ray_otel_events.tracing.task_logs import capture_ray_worker_output, install_log_handler

logger = logging.getLogger("ray_otel_events.tracing")

EXIT_FLUSH_TIMEOUT_S = 10.0
RAY_TRACING_HELPER = "ray.util.tracing.tracing_helper"  # loaded: this is a Ray process with tracing on


@dataclass
class TracingInstallation:
    """What `install_tracing` set up in this process."""

    config: TracingConfig
    tracer_provider: TracerProvider
    logger_provider: LoggerProvider | None
    task_events: TaskEventSpanProcessor | None
    recorder: RayEventRecorder | None
    deferred_spans: DeferredSpans | None = None
    pid: int = field(default_factory=os.getpid)

    def flush(self, timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> bool:
        """Deferred spans -> spans -> events -> recorder and log records, then every exporter; True
        if all flushed."""
        millis = int(timeout_s * 1000)
        if self.deferred_spans is not None:
            self.deferred_spans.flush()
        ok = self.tracer_provider.force_flush(millis)  # the task-event processor runs first
        if self.logger_provider is not None:
            ok = self.logger_provider.force_flush(millis) and ok
        return ok


_lock = threading.RLock()
_installation: TracingInstallation | None = None
_exit_registered_pid = -1
_exit_flushed_pid = -1


def current_installation() -> TracingInstallation | None:
    """The installation of this process (or inherited from its fork parent), if any."""
    return _installation


def recorder_from_config(config: TracingConfig) -> RayEventRecorder | None:
    """A started recorder exporting to `RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS`, or None when unset."""
    if not config.aggregator_address:
        return None
    recorder = RayEventRecorder.to_aggregator(
        config.aggregator_address, config=RecorderConfig.from_env(), node_id=config.node_id or None
    )
    recorder.start()
    return recorder


def _ray_sends_them(config: TracingConfig) -> bool:
    """Whether Ray's core workers export this process's task events themselves: then a recorder
    would send the same tasks again, under the task ids a hook derives from its spans (it cannot
    know Ray's when a task is submitted), as tasks Ray never had. Ray's events are the state."""
    if config.aggregator_address and config.ray_exports_task_events:
        logger.info(
            "ray_otel_events: Ray's core workers export their own task events (%s=1), so the hook "
            "sends none to %s (pid %d)",
            CORE_WORKER_RAY_EVENTS,
            config.aggregator_address,
            os.getpid(),
        )
        return True
    return False


def _tracer_provider(resource: Resource) -> tuple[TracerProvider, DeferredSpans | None]:
    """The global SDK provider if someone already set one (we add to it), else a new global one
    whose ids let submission spans be created off the submitting thread and whose tracers are
    cached by name (Ray asks for one per task)."""
    existing = trace.get_tracer_provider()
    if isinstance(existing, TracerProvider):
        return existing, None
    deferred = DeferredSpans()
    provider = CachingTracerProvider(resource=resource, id_generator=deferred.id_generator)
    trace.set_tracer_provider(provider)
    return provider, deferred


def run_setup_hook(hook: str, install: Callable[[], None]) -> None:
    """A startup hook's body: a process that already has an installation (its own, or its fork
    parent's) adopts it, any other calls `install`; a failure is reported once, never raised, as a
    hook must never take its process down."""
    try:
        if current_installation() is not None:
            install_tracing()
            return
        install()
    except Exception as exc:
        report_setup_failure(hook, exc)


def install_tracing(
    span_processors: Sequence[SpanProcessor] = (),
    log_processors: Sequence[LogRecordProcessor] = (),
    *,
    config: TracingConfig | None = None,
    resource: Resource | None = None,
    event_logs: bool = True,
    event_log_sink: EventSink | None = None,
) -> TracingInstallation:
    """Install tracing and the event side in this process (idempotent; see the module doc).

    Event log records go to `event_log_sink` when given (the OTLP hook's own encoder), else through
    the logger provider of `log_processors`."""
    global _installation
    with _lock:
        if _installation is not None:
            if _installation.pid != os.getpid():
                _adopt_after_fork(_installation)
            return _installation
        ray_session = connected_session_name()
        config = with_ray_session(config if config is not None else TracingConfig.from_env(), ray_session)
        resource = resource if resource is not None else Resource.create()
        tracer_provider, deferred_spans = _tracer_provider(resource)
        install_w3c_propagator()  # Ray's wrappers inject and extract through it every task
        if config.ray_wrappers and RAY_TRACING_HELPER in sys.modules:
            _install_ray_wrappers()
        recorder = None if ray_session and _ray_sends_them(config) else recorder_from_config(config)
        sinks: list[EventSink] = [] if recorder is None else [RecorderSink(recorder)]
        logger_provider: LoggerProvider | None = None
        if log_processors:
            logger_provider = LoggerProvider(resource=resource)
            for log_processor in log_processors:
                logger_provider.add_log_record_processor(log_processor)
            if not isinstance(_logs.get_logger_provider(), LoggerProvider):
                _logs.set_logger_provider(logger_provider)
            install_log_handler()
            keeper = capture_ray_worker_output() if config.task_output else None
            if keeper is not None:
                tracer_provider.add_span_processor(keeper)
        if event_logs and event_log_sink is not None:
            sinks.append(event_log_sink)
        elif event_logs and logger_provider is not None:
            emitter = EventLogEmitter(
                logger_provider.get_logger(semconv.INSTRUMENTATION_SCOPE),
                flush=logger_provider.force_flush,
            )
            sinks.append(emitter)
        task_events: TaskEventSpanProcessor | None = None
        if sinks:
            task_events = TaskEventSpanProcessor(
                sinks,
                factory=EventFactory(session_name=config.session_name),
                sync_task_end=config.sync_task_events,
            )
            tracer_provider.add_span_processor(task_events)
        for span_processor in span_processors:
            tracer_provider.add_span_processor(span_processor)
        _installation = TracingInstallation(
            config, tracer_provider, logger_provider, task_events, recorder, deferred_spans
        )
        _register_exit_flush()
        return _installation


def _install_ray_wrappers() -> None:
    """Ray's tracing wrappers call cheaper helpers that give the same spans (only imported in a
    process that has Ray's tracing loaded: importing Ray elsewhere would cost a second)."""
    from ray_otel_events.tracing import ray_wrappers

    ray_wrappers.install()


def _adopt_after_fork(installation: TracingInstallation) -> None:
    installation.pid = os.getpid()
    if installation.recorder is not None:
        installation.recorder.start()  # its thread did not survive the fork
    _register_exit_flush()


def flush_at_exit() -> None:
    """Flush this process's installation (bounded), once: atexit and multiprocessing's finalizers may
    both call it, and by the second call the SDK's own exit hook has shut the providers down."""
    global _exit_flushed_pid
    installation = _installation
    if installation is None or installation.pid != os.getpid() or _exit_flushed_pid == os.getpid():
        return
    _exit_flushed_pid = os.getpid()
    try:
        if not installation.flush(EXIT_FLUSH_TIMEOUT_S):
            logger.warning("ray_otel_events: not everything could be flushed at exit (pid %d)", os.getpid())
    except Exception:
        logger.exception("ray_otel_events: flush at exit failed (pid %d)", os.getpid())


def _register_exit_flush() -> None:
    """atexit for normal interpreter exit, a multiprocessing finalizer for children ending in os._exit."""
    global _exit_registered_pid
    pid = os.getpid()
    if _exit_registered_pid == pid:
        return
    if _exit_registered_pid == -1:
        atexit.register(flush_at_exit)  # inherited by forked children; it checks the pid
    multiprocessing.util.Finalize(None, flush_at_exit, exitpriority=100)
    _exit_registered_pid = pid
