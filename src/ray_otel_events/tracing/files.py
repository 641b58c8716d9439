"""Spans and log records appended as JSON lines to `<dir>/<pid><suffix>`, off the caller's thread.

Ray's bundled hook writes each span synchronously (SimpleSpanProcessor + ConsoleSpanExporter), which
puts JSON encoding and a write(2) on every task submission. Here `on_end` only queues the span; a
background thread formats and appends in batches shortly after, `force_flush` writes everything now,
and the installation flushes at interpreter exit and at multiprocessing child exit (which ends with
`os._exit`, skipping atexit), so a worker's last spans are on disk before it is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext, SpanKind

from ray_otel_events.otel import semconv
from ray_otel_events.otel.span_json import (
    log_record_to_json_line,
    plain_span_json_line,
    span_fields_to_json_line,
    span_to_json_line,
)
from ray_otel_events.tracing.background import BatchingQueue, at_fork_in_child
from ray_otel_events.tracing.direct_spans import DirectSpan

logger = logging.getLogger("ray_otel_events.tracing")

SPAN_FILE_SUFFIX = ".json"
LOG_FILE_SUFFIX = ".logs.jsonl"

T = TypeVar("T")


class LineFileWriter(Generic[T]):
    """Appends `format_line(item)` lines to `<directory>/<pid><suffix>`, batched in the background.

    The file is opened for append on first write, per process, so a forked child writes its own
    file. Failures are reported once per process and counted in `failed`; `written` counts lines
    on disk.
    """

    def __init__(
        self, directory: str, suffix: str, format_line: Callable[[T], str], *, linger_s: float = 0.05
    ) -> None:
        self.directory = directory
        self.suffix = suffix
        self.format_line = format_line
        self.written = 0
        self.failed = 0
        self._fd: int | None = None  # this process's: a forked child opens its own
        self._reported_pid = -1
        self.queue: BatchingQueue[T] = BatchingQueue(
            self._write_batch, name="ray_otel_events.files", linger_s=linger_s
        )
        at_fork_in_child(self._after_fork_in_child)

    @property
    def path(self) -> str:
        """This process's file (whether or not written yet)."""
        return os.path.join(self.directory, f"{os.getpid()}{self.suffix}")

    def append(self, item: T) -> None:
        if not self.queue.append(item):
            self.failed += 1

    def flush(self) -> bool:
        failed = self.failed
        self.queue.flush()
        return self.failed == failed

    def write_now(self, *items: T) -> bool:
        """Writes what is queued and then `items`, on this thread; True if all of it is on disk."""
        failed = self.failed
        if not self.queue.handle_now(*items):
            self.failed += len(items)
        return self.failed == failed

    def close(self) -> bool:
        failed = self.failed
        self.queue.close()
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        return self.failed == failed

    def _write_batch(self, items: list[T]) -> None:
        lines = []
        for item in items:
            try:
                lines.append(self.format_line(item))
            except Exception as exc:  # one bad item must not cost the batch
                self.failed += 1
                self._report(f"cannot format {type(item).__name__}: {exc!r}")
        if not lines:
            return
        data = (lines[0] + "\n" if len(lines) == 1 else "\n".join(lines) + "\n").encode()
        try:
            fd = self._open()
            written = os.write(fd, data)
            if written < len(data):  # a short write (a full disk, a signal): the rest, as it goes
                view = memoryview(data)[written:]
                while view:
                    view = view[os.write(fd, view) :]
        except OSError as exc:
            self.failed += len(lines)
            self._report(f"cannot write {self.path}: {exc}")
            return
        self.written += len(lines)

    def _open(self) -> int:
        fd = self._fd
        if fd is None:
            os.makedirs(self.directory, exist_ok=True)
            fd = self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return fd

    def _after_fork_in_child(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the parent's file: the child writes `<its pid><suffix>`
        self._fd = None

    def _report(self, message: str) -> None:
        if self._reported_pid != os.getpid():
            self._reported_pid = os.getpid()
            logger.error("ray_otel_events: %s (reported once per process)", message)


class SpanFileProcessor(SpanProcessor):
    """Ended spans as `ReadableSpan.to_json(indent=None)` lines in `<directory>/<pid>.json`.

    When a task's execute span (`... ray.remote_worker`) ends, everything queued in this process is
    written before the task returns: Ray kills actors when their job ends, and every worker when a
    `ray.init()` cluster shuts down, without any exit hook, so the spans of finished tasks must
    already be on disk. Submission spans stay off the submitting thread.
    """

    accepts_direct_spans = True  # reads ended spans through ReadableSpan only

    def __init__(self, directory: str, *, suffix: str = SPAN_FILE_SUFFIX, linger_s: float = 0.05) -> None:
        self.writer: LineFileWriter[ReadableSpan | str] = LineFileWriter(
            directory, suffix, _line_of, linger_s=linger_s
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if type(span) is DirectSpan:  # its fields, without a property call each
            context, kind, name = span._context, span._kind, span._name
        else:
            context, kind, name = span.context, span.kind, span.name
        if context is not None and context.trace_flags.sampled:
            if kind is SpanKind.CONSUMER and name.endswith(semconv.EXECUTE_SUFFIX):
                self.writer.write_now(span)  # no hand-over: the task's own thread pays, once
            else:
                self.writer.append(span)

    def submission_line(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        start_ns: int,
        end_ns: int,
        attributes: Any,
        tracer: Any,
    ) -> str:
        """A deferred submission span's line, made without the span (tracing/deferred_spans.py)."""
        return plain_span_json_line(name, context, parent, start_ns, end_ns, attributes, tracer.resource)

    def write_lines(self, lines: list[str]) -> None:
        """Span lines made elsewhere (deferred submission spans', made without the spans), written
        now on the calling thread (already a background one) after what is queued."""
        self.writer.write_now(*lines)

    def shutdown(self) -> None:
        self.writer.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.writer.flush()


def _line_of(item: ReadableSpan | str) -> str:
    kind = type(item)
    if kind is str:
        return item  # type: ignore[return-value]
    if kind is DirectSpan:
        return span_fields_to_json_line(*item.line_fields())  # type: ignore[union-attr]
    return span_to_json_line(item)  # type: ignore[arg-type]


class LogRecordFileProcessor(LogRecordProcessor):
    """Log records as `ReadableLogRecord.to_json(indent=None)` lines in `<directory>/<pid>.logs.jsonl`."""

    def __init__(self, directory: str, *, suffix: str = LOG_FILE_SUFFIX, linger_s: float = 0.05) -> None:
        self.writer: LineFileWriter[ReadWriteLogRecord] = LineFileWriter(
            directory, suffix, log_record_to_json_line, linger_s=linger_s
        )

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        self.writer.append(log_record)

    def shutdown(self) -> None:
        self.writer.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.writer.flush()
