"""A task's output as log records tied to its span, and echoed where it was submitted, as Ray does.

In a worker, `TaskOutput.begin` and `end` wrap one task: lines written to `sys.stdout` / `sys.stderr`
and records that reach the root logger become OTel log records of the global LoggerProvider
(the hook's: beside the spans for the local hook, OTLP for the OTLP hook), emitted while the
task's execution span is current, so they carry its trace and span ids, plus `ray.task_id`,
`log.iostream`, `process.pid` and `code.function`. With a driver queue, each line also travels
to the submitting process, where `DriverEcho` prints it as `(func pid=1234) line` (stderr lines
to stderr), like Ray's log monitor. Without one, the output goes to the worker's own streams as
plain Python would write it.

`install_log_handler` is the hooks' part for real Ray: a TaskLogHandler (an OTel LoggingHandler)
on the root logger, so `logging` inside a task gets the current (execution) span's trace context
there too, while records nothing else handles still reach stderr as Python's last resort would.
In a Ray worker, `capture_ray_worker_output` also puts a `_TeeStream` in front of sys.stdout and
sys.stderr: every write still goes to the stream Ray reads (its worker log files, the driver's
echo), and each whole line written while a task runs becomes a log record too. Both stamp what
Ray's worker says of the running task (task id, attempt, actor id, job id) and the pid, read only
when a line is written: a task that prints nothing costs nothing more.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.queues import SimpleQueue
from typing import Any, TextIO, cast

from opentelemetry import _logs, context
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.sdk._logs import LoggingHandler
from opentelemetry.sdk.trace import Span, SpanProcessor

from ray_otel_events.otel import semconv
from ray_otel_events.tracing.background import at_fork_in_child

SCOPE = "ray_otel_events.task_logs"
# What the queue carries: (function, pid, stream, text).
Line = tuple[str, int, str, str]

_SEVERITY = {"stdout": (SeverityNumber.INFO, "INFO"), "stderr": (SeverityNumber.ERROR, "ERROR")}
# Never made OTel records: exporters and their HTTP/gRPC clients log while exporting, and a record
# of that would be exported in turn (a loop when the endpoint is down).
_OWN_LOGGERS = ("opentelemetry", "ray_otel_events", "urllib3", "requests", "grpc")


def _exporting() -> bool:
    """True on an exporter's thread: the SDK's processors suppress instrumentation while exporting."""
    return bool(context.get_value(_SUPPRESS_INSTRUMENTATION_KEY))


def _level_severity(levelno: int) -> tuple[SeverityNumber, str]:
    for threshold, number, text in (
        (logging.CRITICAL, SeverityNumber.FATAL, "CRITICAL"),
        (logging.ERROR, SeverityNumber.ERROR, "ERROR"),
        (logging.WARNING, SeverityNumber.WARN, "WARNING"),
        (logging.INFO, SeverityNumber.INFO, "INFO"),
    ):
        if levelno >= threshold:
            return number, text
    return SeverityNumber.DEBUG, "DEBUG"


def _own(record: logging.LogRecord) -> bool:
    return record.name.startswith(_OWN_LOGGERS)


_active: TaskOutput | None = None  # the capture of the task running in this process, if any
# What Ray's worker says of the task running on this thread, or None between tasks (and outside Ray).
TaskAttributes = Callable[[], "dict[str, Any] | None"]
_task_attributes: TaskAttributes = lambda: None  # noqa: E731
# Ray's own markers for its log monitor (`ray_constants.LOG_PREFIX_*`): not the task's output.
_RAY_MARKERS = (":task_name:", ":actor_name:", ":job_id:")
_echoing = threading.local()  # .on: this thread is echoing a logging record to stderr
_LAST_RESORT_FORMAT = logging.Formatter()  # the message, and its traceback if any, as Python prints it


def _no_other_handler(record: logging.LogRecord, own: logging.Handler) -> bool:
    """True when Python would have used its last-resort handler for this record had `own` not been
    on the root logger (no other handler on the record's way up)."""
    logger: logging.Logger | None = logging.getLogger(record.name) if record.name != "root" else None
    logger = logger or logging.getLogger()
    while logger is not None:
        if any(h is not own for h in logger.handlers):
            return False
        if not logger.propagate:
            return True
        logger = logger.parent
    return True


class TaskLogHandler(LoggingHandler):
    """The hooks' handler on the root logger: each record becomes an OTel record carrying the
    current span's trace context (the SDK does that), our own and the SDK's loggers left out (they
    log while exporting). Being a handler on root must not silence Python's last resort: a
    WARNING+ record no other handler takes is still written to stderr, as it was without us."""

    @staticmethod
    def _get_attributes(record: logging.LogRecord) -> Any:
        attributes = dict(LoggingHandler._get_attributes(record) or {})
        task = _task_attributes()
        if task:
            attributes.update(task)
        return attributes

    def emit(self, record: logging.LogRecord) -> None:
        if not _own(record) and not _exporting():
            super().emit(record)
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and _no_other_handler(record, self):
            if _active is not None:  # inside a captured task: the line goes with the task's output
                _active.line("stderr", _LAST_RESORT_FORMAT.format(record), otel=False)
            else:
                _echoing.on = True  # already a record: a tee on stderr must not make it a second
                try:
                    last.handle(record)
                finally:
                    _echoing.on = False


def install_log_handler() -> None:
    """Once per process: a TaskLogHandler on the root logger."""
    root = logging.getLogger()
    if not any(isinstance(h, TaskLogHandler) for h in root.handlers):
        root.addHandler(TaskLogHandler())


class RayTaskIds:
    """The running task's ids as Ray's worker holds them (its core worker's current task)."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def __call__(self) -> dict[str, Any] | None:
        core = getattr(self._worker, "core_worker", None)
        if core is None:
            return None
        task = core.get_current_task_id()
        if task.is_nil():
            return None
        found: dict[str, Any] = {
            semconv.RAY_TASK_ID: task.hex(),
            semconv.RAY_TASK_ATTEMPT: core.get_current_task_attempt_number(),
            semconv.RAY_JOB_ID: core.get_current_job_id().hex(),
            semconv.PROCESS_PID: os.getpid(),
            semconv.CODE_FUNCTION: core.get_current_task_name() or "",
        }
        actor = self._worker.actor_id
        if not actor.is_nil():
            found[semconv.RAY_ACTOR_ID] = actor.hex()
        return found


class _TeeStream:
    """sys.stdout or sys.stderr of a Ray worker (see the module doc). Anything else a caller asks of
    the stream (fileno, buffer, encoding, isatty...) is the original's."""

    def __init__(self, stream: str, original: Any, attributes: TaskAttributes) -> None:
        self._stream = stream
        self._original = original
        self._attributes = attributes
        self._logger = _logs.get_logger(SCOPE)
        self._severity = _SEVERITY[stream]
        self._pending = ""
        self._pending_task: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def write(self, text: str) -> int:
        written: int = self._original.write(text)
        # Ray writes a marker line to both streams before every task: the common case, kept first.
        if not text or (
            not self._pending and text.startswith(_RAY_MARKERS) and text.find("\n") == len(text) - 1
        ):
            return written
        if isinstance(text, str) and not _exporting() and not getattr(_echoing, "on", False):
            self._collect(text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _collect(self, text: str) -> None:
        with self._lock:
            task = self._attributes()
            if self._pending and task != self._pending_task:  # a partial line of another task
                self._emit(self._pending, self._pending_task)
                self._pending = ""
            lines = (self._pending + text).split("\n")
            self._pending = lines.pop()
            self._pending_task = task
            for line in lines:
                self._emit(line, task)

    def _emit(self, line: str, task: dict[str, Any] | None) -> None:
        if task is None or line.startswith(_RAY_MARKERS):
            return
        number, level = self._severity
        self._logger.emit(
            timestamp=time.time_ns(),
            severity_number=number,
            severity_text=level,
            body=line,
            attributes={**task, semconv.LOG_IOSTREAM: self._stream},
        )


class TeeBeforeTasks(SpanProcessor):
    """Ray's worker replaces sys.stdout and sys.stderr after the hook ran (default_worker.py opens
    them again, unbuffered): each span start puts the tee back in front if it is gone, one type
    check a span. It never reads the span, so spans may stay direct (tracing/direct_spans.py)."""

    accepts_direct_spans = True

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        if type(sys.stdout) is not _TeeStream:
            sys.stdout = _TeeStream("stdout", sys.stdout, _task_attributes)
        if type(sys.stderr) is not _TeeStream:
            sys.stderr = _TeeStream("stderr", sys.stderr, _task_attributes)


def capture_ray_worker_output() -> SpanProcessor | None:
    """In a Ray worker process (not a driver): tasks' prints and `logging` become log records with
    the task's ids (see the module doc). Returns the span processor that keeps the streams teed,
    None outside a Ray worker."""
    global _task_attributes
    ray_worker = sys.modules.get("ray._private.worker")
    worker = getattr(ray_worker, "global_worker", None)
    if ray_worker is None or worker is None or getattr(worker, "mode", None) != ray_worker.WORKER_MODE:
        return None
    _task_attributes = RayTaskIds(worker)
    keeper = TeeBeforeTasks()
    keeper.on_start(cast(Span, None))  # now too: a line written before the first span is kept
    return keeper


class _LineWriter(io.TextIOBase):
    """A text stream that hands each complete line to its TaskOutput (the rest at close)."""

    def __init__(self, output: TaskOutput, stream: str, original: TextIO) -> None:
        self._output = output
        self._stream = stream
        self._original = original
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", "utf-8") or "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._output.line(self._stream, line)
        return len(text)

    def close_lines(self) -> None:
        if self._pending:
            self._output.line(self._stream, self._pending)
            self._pending = ""


class _RecordCapture(logging.Handler):
    """During a task: logging records as OTel records unless another LoggingHandler already
    makes them (never of our own or the SDK's loggers), and echoed, as Python's last resort would
    print them, when nothing else would show them (no other handler on the root logger, WARNING
    and above)."""

    def __init__(self, output: TaskOutput, emit_otel: bool, echo: bool) -> None:
        super().__init__()
        self._output = output
        self._emit_otel = emit_otel
        self._echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        echo = self._echo and record.levelno >= logging.WARNING
        otel = self._emit_otel and not _own(record)
        if not (echo or otel):
            return
        try:
            text = _LAST_RESORT_FORMAT.format(record) if echo else record.getMessage()
        except Exception:
            self.handleError(record)
            return
        self._output.line("stderr", text, _level_severity(record.levelno), otel=otel, echo=echo)


class TaskOutput:
    """One per worker process; `begin` and `end` wrap each task (see the module doc). A task that
    writes nothing costs swapping the two streams and back: the attributes of its lines are made
    when it writes the first one, and the two line writers are the process's own, reused."""

    def __init__(self, to_driver: SimpleQueue[Line | None] | None) -> None:
        self.to_driver = to_driver
        self.pid = os.getpid()  # a forked child's own after the fork
        self._logger = _logs.get_logger(SCOPE)
        self._task = ("", "", "")  # (task id, job id, function) of the task running, else the last one
        self._attributes: dict[str, Any] | None = None  # made from `_task` at the first line
        self._saved: tuple[TextIO, TextIO] = (sys.stdout, sys.stderr)
        self._writers = (_LineWriter(self, "stdout", sys.stdout), _LineWriter(self, "stderr", sys.stderr))
        at_fork_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        self.pid = os.getpid()
        self._attributes = None

    def line(
        self,
        stream: str,
        text: str,
        severity: tuple[SeverityNumber, str] | None = None,
        *,
        otel: bool = True,
        echo: bool = True,
    ) -> None:
        if otel:
            attributes = self._attributes
            if attributes is None:
                task_hex, job_hex, function = self._task
                attributes = self._attributes = {
                    semconv.RAY_TASK_ID: task_hex,
                    semconv.RAY_JOB_ID: job_hex,
                    semconv.PROCESS_PID: self.pid,
                    semconv.CODE_FUNCTION: function,
                }
            number, level = severity or _SEVERITY[stream]
            self._logger.emit(
                timestamp=time.time_ns(),
                severity_number=number,
                severity_text=level,
                body=text,
                attributes={**attributes, semconv.LOG_IOSTREAM: stream},
            )
        if not echo:
            return
        if self.to_driver is not None:
            self.to_driver.put((self._task[2], self.pid, stream, text))
        else:
            target = self._saved[1] if stream == "stderr" else self._saved[0]
            target.write(text + "\n")

    def begin(self, function: str, task_hex: str, job_hex: str) -> tuple[Any, ...]:
        """Before a task, inside its execution span (so records carry its trace context); returns
        what `end` restores."""
        global _active
        if _active is None:  # text written after the last task ended, through a stream it kept
            for writer in self._writers:
                if writer._pending:
                    writer.close_lines()
        self._task = (task_hex, job_hex, function)
        self._attributes = None
        root = logging.root
        # With the hooks' TaskLogHandler on root, records are already OTel records and echoed by it.
        # Without it, a handler of our own does both for the task's duration: OTel records unless
        # another OTel handler makes them, echo where Python's last resort would have printed.
        records: _RecordCapture | None = None
        handlers = root.handlers
        for handler in handlers:
            if isinstance(handler, TaskLogHandler):
                break
        else:
            otel = any(isinstance(h, LoggingHandler) for h in handlers)
            others = any(not isinstance(h, LoggingHandler) for h in handlers)
            records = _RecordCapture(self, emit_otel=not otel, echo=not others)
            root.addHandler(records)
        saved = self._saved = (sys.stdout, sys.stderr)
        writers = self._writers
        if _active is not None:  # a capture inside a capture: its own writers
            writers = _LineWriter(self, "stdout", saved[0]), _LineWriter(self, "stderr", saved[1])
        else:
            writers[0]._original, writers[1]._original = saved
        sys.stdout, sys.stderr = writers
        previous, _active = _active, self
        return saved, records, writers, previous

    def end(self, begun: tuple[Any, ...]) -> None:
        """After the task, however it ended: the streams and root's handlers as they were, and the
        task's unfinished lines written."""
        global _active
        saved, records, writers, previous = begun
        _active = previous
        if records is not None:
            logging.root.removeHandler(records)
        sys.stdout, sys.stderr = saved
        self._saved = saved
        for writer in writers:
            if writer._pending:
                writer.close_lines()


class DriverEcho:
    """In the submitting process: prints the workers' lines as `(func pid=N) line`."""

    def __init__(self, queue: SimpleQueue[Line | None]) -> None:
        self.queue = queue
        self._thread = threading.Thread(target=self._run, name="ray-otel-events-task-logs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            function, pid, stream, text = item
            target = sys.stderr if stream == "stderr" else sys.stdout
            print(f"({function} pid={pid}) {text}", file=target, flush=True)

    def stop(self, timeout_s: float = 10.0) -> None:
        """After the workers are gone: print what is left, then end the thread."""
        if self._thread.is_alive():
            self.queue.put(None)
            self._thread.join(timeout_s)
