"""A ProcessPoolExecutor whose tasks are traced the way Ray traces remote functions.

`TracedProcessPoolExecutor(tracing_startup_hook="module:attr", <every ProcessPoolExecutor argument>)`
runs the hook once in the submitting process and once in each worker; each `submit` is a PRODUCER
span `<module>.<func> ray.remote` whose context travels with the call (W3C, global propagator), and
each execution a CONSUMER span `<module>.<func> ray.remote_worker`, its child, with Ray's `ray.*`
attributes, so the task-event processor installed by our hooks turns them into task events exactly
as it does for Ray's spans. A hook that fails in the submitting process raises HookError from the
constructor; one that fails in a worker is reported once and the worker runs its tasks untraced.
Exceptions reach the caller as ProcessPoolExecutor delivers them: same type, same args, the remote
traceback attached as `__cause__`. A task's prints and logging become log records tied to its
execution span and, unless `log_to_driver=False`, are printed here as `(func pid=N) line`, as
Ray prints its workers' output (`tracing.task_logs`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.queues import SimpleQueue
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ray_otel_events.config import ConfigError, TracingConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import TaskStatus
from ray_otel_events.otel import semconv
from ray_otel_events.otel.task_spans import FUNCTION, derive_task_id
from ray_otel_events.tracing.deferred_spans import record_submit_span
from ray_otel_events.tracing.direct_spans import DirectSpan
from ray_otel_events.tracing.hooks import run_hook_once
from ray_otel_events.tracing.install import current_installation, flush_at_exit
from ray_otel_events.tracing.propagation import Travelling, arrived_context, travelling_context
from ray_otel_events.tracing.task_logs import DriverEcho, Line, TaskOutput

P = ParamSpec("P")
R = TypeVar("R")

_STATE_NAMES = {value: name for name, value in TaskStatus.items()}
# Plain ints, read per task: the enum wrapper resolves each name in Python.
_RUNNING, _FAILED, _FINISHED = int(TaskStatus.RUNNING), int(TaskStatus.FAILED), int(TaskStatus.FINISHED)


@dataclass(frozen=True)
class _ProcessIdentity:
    """The Ray-style identity of this process: pid, node, worker id and its own job id."""

    pid: int
    node_hex: str
    worker_hex: str
    job_hex: str
    pid_text: str


_identity: _ProcessIdentity | None = None
# (derived task id hex, job hex) of the task this process is executing, for nested submissions.
_running_task: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "ray_otel_events_running_task", default=None
)


def _process_identity() -> _ProcessIdentity:
    """Made once per process (a forked child makes its own: `_forget_process_state`): the job of a
    top-level submitter is derived from its pid, so tasks of one submitting process share one job id."""
    global _identity
    if _identity is None:
        pid = os.getpid()
        try:
            node = TracingConfig.from_env().node_id
        except ConfigError:
            node = b""
        _identity = _ProcessIdentity(
            pid=pid,
            node_hex=(node or ids.node_id_for_host(os.uname().nodename)).hex(),
            worker_hex=ids.new_unique_id().hex(),
            job_hex=ids.job_id(pid & 0xFFFFFFFF).hex(),
            pid_text=str(pid),
        )
    return _identity


_tracer: trace.Tracer | None = None


def _worker_tracer() -> trace.Tracer:
    """One tracer per process (the SDK builds a new one per `get_tracer` call); the hook has run in
    the worker's initializer, before any task, so the provider it set is the one to keep."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(semconv.INSTRUMENTATION_SCOPE)
    return _tracer


# Job hex -> the task id's actor part for that job (a worker sees one or a few jobs).
_actor_parts: dict[str, bytes] = {}


def _actor_part(job_hex: str) -> bytes:
    part = _actor_parts.get(job_hex)
    if part is None:
        if len(_actor_parts) >= 1024:  # a bound for safety only
            _actor_parts.clear()
        part = _actor_parts[job_hex] = ids.nil_actor_id(bytes.fromhex(job_hex))
    return part


def _forget_process_state() -> None:
    """In a forked child: its own pid, worker id and job, and a tracer found again."""
    global _identity, _tracer
    _identity = None
    _tracer = None


os.register_at_fork(after_in_child=_forget_process_state)


def function_name(fn: Callable[..., Any]) -> str:
    """`<module>.<name>` as Ray names remote functions (partials are named after what they wrap)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return f"{module}.{name}"


def _base_attributes(identity: _ProcessIdentity, function: str, job_hex: str) -> dict[str, Any]:
    return {
        semconv.RAY_REMOTE: FUNCTION,
        semconv.RAY_FUNCTION: function,
        semconv.RAY_PID: identity.pid_text,
        semconv.RAY_JOB_ID: job_hex,
        semconv.RAY_NODE_ID: identity.node_hex,
        semconv.RAY_WORKER_ID: identity.worker_hex,
    }


# Each state's name and event attributes, made once: the event copies them.
_STATE_EVENTS = {state: (name, {semconv.RAY_STATE: name}) for state, name in _STATE_NAMES.items()}


def _state_event(span: trace.Span, state: int) -> None:
    name, attributes = _STATE_EVENTS[state]
    if type(span) is DirectSpan:
        span.add_string_event(name, attributes, time.time_ns())
    else:
        span.add_event(name, attributes, timestamp=time.time_ns())


def _run_traced(
    name: str,
    job_hex: str,
    parent_context: Travelling,
    fn: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """Executes one task in a worker inside its CONSUMER span (child of the submitter's span).

    The submission's name, job and trace context travel as plain arguments (no object of ours to
    pickle and rebuild per call), the context in its travelling form (`propagation.Travelling`).
    What `with trace.use_span(span, end_on_exit=True): ...` in the extracted context does, written
    out: the generator-based context manager costs more than the rest of an untraced task."""
    identity = _identity or _process_identity()
    tracer = _tracer or _worker_tracer()
    extracted, parent = arrived_context(parent_context)
    attributes = _base_attributes(identity, name, job_hex)
    task_hex = ""
    if parent is not None:
        actor_part = _actor_parts.get(job_hex) or _actor_part(job_hex)
        task_hex = derive_task_id(parent.trace_id, parent.span_id, actor_part).hex()
        attributes[semconv.RAY_TASK_ID] = task_hex
    span = tracer.start_span(
        name + semconv.EXECUTE_SUFFIX, extracted, kind=SpanKind.CONSUMER, attributes=attributes
    )
    try:
        # The span in the extracted context (its baggage kept), current while the task runs.
        token = context.attach(trace.set_span_in_context(span, extracted))
        try:
            return _run_in_span(span, name, job_hex, task_hex, fn, args, kwargs)
        finally:
            context.detach(token)
    except Exception as exc:  # as use_span: Exception only (not GeneratorExit and the like)
        if span.is_recording():
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        span.end()


def _run_in_span(
    span: trace.Span,
    name: str,
    job_hex: str,
    task_hex: str,
    fn: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """The task itself between its RUNNING and FINISHED (or FAILED) events."""
    if span.is_recording():
        _state_event(span, _RUNNING)
    running = _running_task.set((task_hex, job_hex)) if task_hex else None
    try:
        if _task_output is None:
            result = fn(*args, **kwargs)
        else:
            begun = _task_output.begin(name.rpartition(".")[2], task_hex, job_hex)
            try:
                result = fn(*args, **kwargs)
            finally:
                _task_output.end(begun)
    except BaseException:
        if span.is_recording():
            _state_event(span, _FAILED)
        raise
    finally:
        if running is not None:
            _running_task.reset(running)
    if span.is_recording():
        _state_event(span, _FINISHED)
    return result


def _run_chunk(fn: Callable[..., R], chunk: list[tuple[Any, ...]]) -> list[R]:
    return [fn(*args) for args in chunk]


def _flush_global_providers() -> None:
    """Flush whatever SDK providers the hook installed, ours or not (batch processors included)."""
    from opentelemetry import _logs

    flush_at_exit()
    for provider in (trace.get_tracer_provider(), _logs.get_logger_provider()):
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            with contextlib.suppress(Exception):  # exiting anyway; exporters report their own errors
                force_flush(10_000)


_task_output: TaskOutput | None = None


def _init_worker(
    hook: str | None,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
    to_driver: SimpleQueue[Line | None] | None,
) -> None:
    """Worker start: the hook (failures reported, never fatal), exit flush, task output capture,
    then the user's initializer."""
    global _task_output
    if hook is not None:
        run_hook_once(hook)
    _task_output = TaskOutput(to_driver)
    # Pool workers end with os._exit, which skips atexit; multiprocessing runs its finalizers first.
    multiprocessing.util.Finalize(None, _flush_global_providers, exitpriority=90)
    if initializer is not None:
        initializer(*initargs)


class _ReplacingProcessPoolExecutor(ProcessPoolExecutor):
    """CPython gh-115634 (3.11 up to the fix): after a worker exits at `max_tasks_per_child`, the
    pool may take a stale idle token for a live worker, never start a replacement, and hang. The
    fix (`_replace_dead_worker`, 3.13.x+) replaces exited workers without consulting the token; this
    does the same on Pythons that lack it. Only the manager thread replaces exited workers."""

    def _adjust_process_count(self) -> None:
        if threading.current_thread() is getattr(self, "_executor_manager_thread", None):
            if len(self._processes) < self._max_workers:  # type: ignore[attr-defined]
                self._spawn_process()  # type: ignore[attr-defined]
            return
        super()._adjust_process_count()


_POOL_CLASS: type[ProcessPoolExecutor] = (
    ProcessPoolExecutor
    if hasattr(ProcessPoolExecutor, "_replace_dead_worker")
    else _ReplacingProcessPoolExecutor
)


def pool_context(mp_context: BaseContext | None, max_tasks_per_child: int | None) -> BaseContext:
    """The context ProcessPoolExecutor starts its workers from: the one given, else spawn when
    `max_tasks_per_child` is set (fork cannot replace workers safely), else the default one. Every
    multiprocessing object the workers receive must come from it: a lock made by a fork context
    cannot be pickled to a spawned or forkserver child."""
    if mp_context is not None:
        return mp_context
    if max_tasks_per_child is not None:
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context()


class TracedProcessPoolExecutor(Executor):
    """ProcessPoolExecutor + Ray-style PRODUCER/CONSUMER spans and a tracing startup hook."""

    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: BaseContext | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        max_tasks_per_child: int | None = None,
        tracing_startup_hook: str | None = None,
        log_to_driver: bool = True,
    ) -> None:
        self.tracing_startup_hook = tracing_startup_hook
        if tracing_startup_hook is not None:
            run_hook_once(tracing_startup_hook, raise_errors=True)
        pool_class = _POOL_CLASS if max_tasks_per_child is not None else ProcessPoolExecutor
        # Given to the pool explicitly, so the queue below and the workers share one context.
        mp_context = pool_context(mp_context, max_tasks_per_child)
        queue: SimpleQueue[Line | None] | None = None
        self._echo: DriverEcho | None = None
        if log_to_driver:
            queue = mp_context.SimpleQueue()
            self._echo = DriverEcho(queue)
        try:
            self._pool = pool_class(
                max_workers,
                mp_context,
                _init_worker,
                (tracing_startup_hook, initializer, initargs, queue),
                max_tasks_per_child=max_tasks_per_child,
            )
        except BaseException:  # arguments ProcessPoolExecutor refuses: no echo thread left behind
            if self._echo is not None:
                self._echo.stop()
            raise
        self._tracer = trace.get_tracer(semconv.INSTRUMENTATION_SCOPE)
        # Our installation, if any, is in place once the hook has run: the tracer above is its own.
        installation = current_installation()
        self._deferred_spans = installation.deferred_spans if installation is not None else None

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return self._submit_named(function_name(fn), fn, args, kwargs)

    def _submit_named(
        self, name: str, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[R]:
        identity = _identity or _process_identity()
        running = _running_task.get()
        attributes = _base_attributes(identity, name, running[1] if running else identity.job_hex)
        if running is not None:
            attributes[semconv.RAY_TASK_ID] = running[0]  # as Ray: the submitting task's id
        # The span ends when the call is ready to hand over, before the pool sees it: a worker may
        # start it before submit() returns, and SUBMITTED_TO_WORKER (the span's end) must not come
        # after RUNNING. It is never made current, so nothing else can nest under it here.
        parent_context = record_submit_span(
            self._tracer, name + semconv.SUBMIT_SUFFIX, attributes, self._deferred_spans, travelling_context
        )
        return self._pool.submit(
            _run_traced, name, attributes[semconv.RAY_JOB_ID], parent_context, fn, args, kwargs
        )

    def map(
        self,
        fn: Callable[..., R],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[R]:
        """As ProcessPoolExecutor.map; with chunksize > 1 each chunk is one traced task."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if chunksize == 1:
            return super().map(fn, *iterables, timeout=timeout)
        name = function_name(fn)
        zipped = zip(*iterables, strict=False)
        chunks = iter(lambda: list(itertools.islice(zipped, chunksize)), [])
        futures = [self._submit_named(name, _run_chunk, (fn, chunk), {}) for chunk in chunks]
        deadline = None if timeout is None else time.monotonic() + timeout

        def results() -> Iterator[R]:
            try:
                futures.reverse()
                while futures:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    yield from futures.pop().result(remaining)
            finally:
                for future in futures:
                    future.cancel()

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait and self._echo is not None:
            self._echo.stop()  # the workers are gone: every line they wrote is in the queue
