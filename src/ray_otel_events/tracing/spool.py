"""The OTLP hook's hand-off: ended spans appended to a per-node spool, sent by a forwarder process.

Ray ends its workers without exit hooks (at `ray.shutdown()`, `ray stop`, `max_calls`, a killed
actor), so whatever a worker's exporter still holds in memory is lost, and exporting from every
worker costs each one the encoding, the event records and the HTTP or gRPC client. Here a traced
process only appends one line per span, and one per log record (a task's prints and `logging`:
`SpoolLogRecordProcessor`), to its own file in the spool folder: a task's execution span before
the task returns (on the task's thread, one write(2) together with anything queued, so with the
lines the task wrote), everything else from a background thread within 50 ms and at exit. One
forwarder process per spool folder (tracing/forwarder.py, started by the first process that finds
none, detached so that ending the cluster does not end it) reads the files, makes the OTLP spans,
event records and log records and sends them, deleting only what the endpoint acknowledged.

Files: `<folder>/<pid>.<nonce>.<seq>.spool`, a header line (the process's resource) then one
JSON array per span (`span_line`) or log record (`log_record_line`); a file is held under `flock`
by its writer while it writes it, so the forwarder knows a file is complete when it can take the
lock (the writer ended, however it ended, or moved on to its next file at `ROTATE_BYTES`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext, SpanKind, StatusCode
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from ray_otel_events import native
from ray_otel_events.otel import semconv
from ray_otel_events.tracing.background import BatchingQueue, at_fork_in_child
from ray_otel_events.tracing.direct_spans import UNSET_STATUS, DirectSpan

try:  # the lines written compiled (setup.py builds it where a C compiler is present)
    from ray_otel_events.native import _spool_line
except ImportError:
    _spool_line = None  # type: ignore[assignment]

logger = logging.getLogger("ray_otel_events.tracing")

SPOOL_SUFFIX = ".spool"
PENDING_SUFFIX = ".new"  # a file being created: not yet locked and headed, never read
LOCK_FILE = "forwarder.lock"
LOG_FILE = "forwarder.log"
STATS_FILE = "forwarder.stats.json"
ACK_SUFFIX = ".ack"  # beside a spool file: how far the endpoint has acknowledged it
ROTATE_BYTES = 8 * 1024 * 1024
FORWARDER_CHECK_S = 5.0  # how often a writing process makes sure a forwarder runs
STARTED, ENDED = "S", "E"
LOGGED = "L"  # a log record's line (`log_record_line`)
# A start whose span ends in the same write: `["s", span id]`, and the forwarder reads the span from
# its end line (mostly a task's whole life fits in one write, so its fields are written once).
STARTED_REF = "s"
LINE = "line"  # a queue item that is a ready line


def spool_folder(root: str, key: Mapping[str, str]) -> str:
    """`root/<digest of key>`: one folder, and one forwarder, per destination (endpoints, protocol,
    headers, event records on or off): processes sending elsewhere never share a forwarder."""
    digest = hashlib.sha256(orjson.dumps(dict(sorted(key.items())))).hexdigest()[:16]
    return os.path.join(root, digest)


def _plain(value: Any) -> Any:
    """orjson's fallback: attribute mappings (BoundedAttributes, mapping proxies) as dicts."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_KINDS = {kind: kind.value for kind in SpanKind}
_SCOPES: dict[int, tuple[Any, str, str, str]] = {}  # id(scope) -> (scope, name, version, schema url)
_MASK64 = (1 << 64) - 1


def _scope_fields(scope: Any) -> tuple[str, str, str]:
    """(name, version, schema url) of an instrumentation scope, kept per scope object."""
    known = _SCOPES.get(id(scope))
    if known is not None and known[0] is scope:
        return known[1], known[2], known[3]
    fields = ("", "", "") if scope is None else (scope.name, scope.version or "", scope.schema_url or "")
    if len(_SCOPES) >= 256:  # a few per process: a bound for safety only
        _SCOPES.clear()
    _SCOPES[id(scope)] = (scope, *fields)
    return fields


def span_line(span: ReadableSpan, kind: str) -> bytes:
    """One spool line: `[kind, name, trace id (high 64 bits), trace id (low 64 bits), span id, flags,
    trace state, parent span id (0: none), parent is remote, span kind, start ns, end ns, status
    code, status description, attributes, events [[name, ns, attributes]], links [[trace id (hex),
    span id, flags, trace state, attributes, is remote]], scope name, scope version, scope schema
    url, dropped attributes, dropped events, dropped links]`. `kind` STARTED writes what is known at
    the start (no end, status or events), STARTED_REF the start reference `["s", span id]`. Written
    on the task's thread for an execution span, so a DirectSpan's fields are read directly rather
    than through the ReadableSpan properties. The Python twin of `_spool_line.span_line`."""
    if kind == STARTED_REF:
        return b'["s",%d]\n' % span.context.span_id
    attributes: Mapping[str, Any]
    events: Sequence[Event]
    if type(span) is DirectSpan:
        name, context, span_kind, parent, start, end, status, attributes, events, links, scope, *counts = (
            span.spool_fields()
        )
        dropped = (counts[0], counts[1], 0)
    else:
        name, context, span_kind, parent = span.name, span.context, span.kind, span.parent
        start, end, status = span.start_time, span.end_time, span.status
        attributes, events, links = span.attributes or {}, span.events, span.links
        scope = span.instrumentation_scope
        dropped = (span.dropped_attributes, span.dropped_events, span.dropped_links)
    assert context is not None
    scope_name, scope_version, scope_schema = _scope_fields(scope)
    trace_id = context.trace_id
    trace_state = context.trace_state
    started = kind == STARTED
    if started or status is UNSET_STATUS:
        code, description = 0, ""
    else:
        code, description = status.status_code.value, status.description or ""
    return orjson.dumps(
        [
            kind,
            name,
            trace_id >> 64,
            trace_id & _MASK64,
            context.span_id,
            int(context.trace_flags),
            trace_state.to_header() if trace_state else "",
            parent.span_id if parent is not None else 0,
            parent is not None and parent.is_remote,
            _KINDS[span_kind],
            start,
            None if started else end,
            code,
            description,
            attributes,
            [[e.name, e.timestamp, e.attributes or {}] for e in events] if events and not started else [],
            [
                [
                    f"{link.context.trace_id:032x}",
                    link.context.span_id,
                    int(link.context.trace_flags),
                    link.context.trace_state.to_header() if link.context.trace_state else "",
                    link.attributes or {},
                    link.context.is_remote,
                ]
                for link in links
            ]
            if links
            else [],
            scope_name,
            scope_version,
            scope_schema,
            dropped[0],
            0 if started else dropped[1],
            dropped[2],
        ],
        default=_plain,
        option=orjson.OPT_APPEND_NEWLINE,
    )


def submission_line(
    name: str,
    context: SpanContext,
    parent: SpanContext | None,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any] | None,
    scope: Any,
) -> bytes:
    """`span_line` of an ended PRODUCER span with these fields, UNSET status and no events or links
    (a deferred submission span), written from the fields without making the span. The Python twin
    of `_spool_line.submission_line`."""
    trace_id = context.trace_id
    trace_state = context.trace_state
    scope_name, scope_version, scope_schema = _scope_fields(scope)
    return orjson.dumps(
        [
            ENDED,
            name,
            trace_id >> 64,
            trace_id & _MASK64,
            context.span_id,
            int(context.trace_flags),
            trace_state.to_header() if trace_state else "",
            parent.span_id if parent is not None else 0,
            parent is not None and parent.is_remote,
            _KINDS[SpanKind.PRODUCER],
            start_ns,
            end_ns,
            0,
            "",
            attributes or {},
            [],
            [],
            scope_name,
            scope_version,
            scope_schema,
            0,
            0,
            0,
        ],
        default=_plain,
        option=orjson.OPT_APPEND_NEWLINE,
    )


def _loggable(value: Any) -> Any:
    """orjson's fallback for a log record's body and attributes: mappings as dicts, anything else
    (bytes, an object a user logged) as its text."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def log_record_line(record: ReadableLogRecord | ReadWriteLogRecord) -> bytes:
    """One spool line of a log record: `["L", time ns, observed time ns, severity number, severity
    text, body, attributes, trace id (high 64 bits), trace id (low 64 bits), span id, flags, scope
    name, scope version, scope schema url, dropped attributes, event name]` (None or 0: unset).
    What no JSON holds is written as its text (`_loggable`). Python only: the forwarder's compiled
    pass hands these lines to its Python twin."""
    log = record.log_record
    scope_name, scope_version, scope_schema = _scope_fields(record.instrumentation_scope)
    trace_id = log.trace_id or 0
    severity = log.severity_number
    return orjson.dumps(
        [
            LOGGED,
            log.timestamp,
            log.observed_timestamp,
            severity.value if severity is not None else None,
            log.severity_text,
            log.body,
            log.attributes or {},
            trace_id >> 64,
            trace_id & _MASK64,
            log.span_id or 0,
            int(log.trace_flags or 0),
            scope_name,
            scope_version,
            scope_schema,
            record.dropped_attributes,
            log.event_name,
        ],
        default=_loggable,
        option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS,
    )


def _python_writes(*_: Any) -> None:
    """The compiled writers' answer when they are not built: the Python twin writes every line."""
    return None


# The compiled writers (the same bytes; None for what they leave to the twins above).
compiled_span_line: Callable[[ReadableSpan, str], bytes | None] = _python_writes
compiled_submission_line: Callable[..., bytes | None] = _python_writes
if _spool_line is not None and native.ENABLED:
    _spool_line.bind(
        DirectSpan,
        SpanContext,
        tuple((kind, kind.value) for kind in SpanKind),
        SpanKind.PRODUCER.value,
        tuple((code, code.value) for code in StatusCode),
        UNSET_STATUS,
        DEFAULT_TRACE_STATE,
        orjson.dumps,
    )
    compiled_span_line = _spool_line.span_line
    compiled_submission_line = _spool_line.submission_line


def header_line(resource: Resource, session_name: str = "") -> bytes:
    """A spool file's first line: the writer's resource and pid, and the session its event records
    carry (the forwarder's default when empty)."""
    return orjson.dumps(
        {
            "resource": dict(resource.attributes),
            "schema_url": resource.schema_url,
            "pid": os.getpid(),
            "session": session_name,
        },
        default=_plain,
        option=orjson.OPT_APPEND_NEWLINE,
    )


# -- the forwarder: one per folder -------------------------------------------------------------

# Takes the folder's lock before the forwarder starts (its imports take a while, and every process
# starting meanwhile would start one more), then forks into init's care and execs the forwarder,
# which inherits the locked descriptor.
_BOOTSTRAP = (
    "import fcntl, os, sys\n"
    "fd = os.open(os.path.join(sys.argv[1], sys.argv[2]), os.O_RDWR | os.O_CREAT, 0o600)\n"
    "try:\n"
    "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "except BlockingIOError:\n"
    "    os._exit(0)\n"
    "if os.fork():\n"
    "    os._exit(0)\n"
    "os.set_inheritable(fd, True)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'ray_otel_events.tracing.forwarder', sys.argv[1],"
    " '--lock-fd', str(fd)])\n"
)


def forwarder_running(folder: str) -> bool:
    """True while a forwarder holds the folder's lock file."""
    try:
        fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if we took it
    return False


def ensure_forwarder(folder: str) -> bool:
    """Start the folder's forwarder unless one runs; True if one was started. It is detached (its
    own session, reparented to init by a double fork), so that ending the processes that started
    it, or the cluster's process tree, leaves it to finish sending; it exits by itself once every
    writer has ended and everything is sent (or given up on for now, left for the next start)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if forwarder_running(folder):
        return False
    with open(os.path.join(folder, LOG_FILE), "ab") as log:
        starter = subprocess.Popen(
            [sys.executable, "-S", "-c", _BOOTSTRAP, folder, LOCK_FILE],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )
    starter.wait()  # the intermediate exits at once; the forwarder is init's child
    return True


# -- the writer: one file at a time per process --------------------------------------------------


class SpoolWriter:
    """Appends lines to this process's current spool file, holding its lock; a new file every
    `rotate_bytes`, and a check that the forwarder runs at the first write and every
    `FORWARDER_CHECK_S` after. Failures are reported once per process and counted in `failed`."""

    def __init__(
        self, folder: str, header: bytes, *, rotate_bytes: int = ROTATE_BYTES, start_forwarder: bool = True
    ) -> None:
        self.folder = folder
        self.start_forwarder = start_forwarder
        self.header = header
        self.rotate_bytes = rotate_bytes
        self.written = 0
        self.failed = 0
        self._fd: int | None = None
        self._pid = -1
        self._seq = 0
        self._nonce = ""
        self._file_bytes = 0
        self._checked = 0.0
        self._reported_pid = -1
        at_fork_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the parent's file (and its lock) stays the parent's
        self._fd = None

    def write(self, data: bytes, lines: int) -> bool:
        try:
            fd = self._file()
            written = os.write(fd, data)
            if written < len(data):  # a short write (a full disk, a signal): the rest, as it goes
                view = memoryview(data)[written:]
                while view:
                    view = view[os.write(fd, view) :]
        except OSError as exc:
            self.failed += lines
            self._report(f"cannot write to the spool {self.folder}: {exc}")
            return False
        self.written += lines
        self._file_bytes += len(data)
        if self._file_bytes >= self.rotate_bytes:
            self.close()
        now = time.monotonic()
        if self.start_forwarder and now - self._checked >= FORWARDER_CHECK_S:
            self._checked = now
            self._ensure_forwarder()
        return True

    def _ensure_forwarder(self) -> None:
        try:
            ensure_forwarder(self.folder)
        except Exception as exc:  # never the traced process's problem
            self._report(f"cannot start the spool forwarder for {self.folder}: {exc!r}")

    def _file(self) -> int:
        if self._fd is not None:  # this process's: a forked child's is reset at the fork
            return self._fd
        pid = os.getpid()
        if self._pid != pid:
            self._pid, self._seq, self._nonce = pid, 0, secrets.token_hex(4)
            self._checked = 0.0
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        self._seq += 1
        path = os.path.join(self.folder, f"{pid}.{self._nonce}.{self._seq:06d}")
        fd = os.open(path + PENDING_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until this process closes it or ends
            os.write(fd, self.header)
            os.rename(path + PENDING_SUFFIX, path + SPOOL_SUFFIX)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._file_bytes = fd, len(self.header)
        return fd

    def close(self) -> None:
        """End this process's current file: it is complete, and the forwarder may send and delete it."""
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None

    def _report(self, message: str) -> None:
        if self._reported_pid != os.getpid():
            self._reported_pid = os.getpid()
            logger.error("ray_otel_events: %s (reported once per process)", message)


class SpoolSpanProcessor(SpanProcessor):
    """Sampled spans as spool lines (see the module doc): execution spans' starts are queued (the
    forwarder makes the RUNNING record from them) and their ends written before the task returns,
    with whatever is queued, in one write; other spans are queued and written in the background."""

    accepts_direct_spans = True  # reads ended spans through ReadableSpan only

    def __init__(
        self,
        folder: str,
        resource: Resource,
        *,
        session_name: str = "",
        linger_s: float = 0.05,
        write_at_end: bool = False,
    ) -> None:
        """`write_at_end`: every span written by the thread that ends it, as execution spans are (the
        lineage mode, whose spans are the user's own: Ray may kill the worker right after its task)."""
        self.folder = folder
        self.write_at_end = write_at_end
        self.writer = SpoolWriter(folder, header_line(resource, session_name))
        self.queue: BatchingQueue[tuple[str, Any]] = BatchingQueue(
            self._write_batch, name="ray_otel_events.spool", linger_s=linger_s
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        started: Any = span  # typed as the SDK's Span, often a DirectSpan
        if type(started) is DirectSpan:  # its fields, without a property call each
            context, kind, name = started._context, started._kind, started._name
        else:
            context, kind, name = span.context, span.kind, span.name
        if (
            kind is SpanKind.CONSUMER
            and context is not None
            and context.trace_flags.sampled
            and name.endswith(semconv.EXECUTE_SUFFIX)
        ):
            self.queue.append((STARTED, span))

    def on_end(self, span: ReadableSpan) -> None:
        if type(span) is DirectSpan:
            context, kind, name = span._context, span._kind, span._name
        else:
            context, kind, name = span.context, span.kind, span.name
        if context is not None and context.trace_flags.sampled:
            if self.write_at_end or (kind is SpanKind.CONSUMER and name.endswith(semconv.EXECUTE_SUFFIX)):
                self.queue.handle_now((ENDED, span))  # no hand-over: the task's own thread pays, once
            else:
                self.queue.append((ENDED, span))

    def submission_line(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any] | None,
        tracer: Any,
    ) -> bytes:
        """A deferred submission span's line, made without the span (tracing/deferred_spans.py)."""
        scope = tracer.scope
        line = compiled_submission_line(name, context, parent, start_ns, end_ns, attributes, scope)
        if line is not None:
            return line
        return submission_line(name, context, parent, start_ns, end_ns, attributes, scope)

    def write_lines(self, lines: list[bytes]) -> None:
        """Lines made elsewhere, written now on the calling thread (already a background one)
        after what is queued."""
        self.queue.handle_now(*[(LINE, line) for line in lines])

    def _write_batch(self, items: list[tuple[str, Any]]) -> None:
        lines = []
        ending = {id(span) for kind, span in items if kind is ENDED} if len(items) > 1 else ()
        for kind, span in items:
            try:
                if kind is LINE:
                    lines.append(span)
                    continue
                if kind is LOGGED:
                    lines.append(log_record_line(span))
                    continue
                if kind is STARTED and id(span) in ending:
                    kind = STARTED_REF
                line = compiled_span_line(span, kind)
                lines.append(line if line is not None else span_line(span, kind))
            except Exception as exc:  # one bad span or record must not cost the batch
                self.writer.failed += 1
                what = "a log record" if kind is LOGGED else f"span {span.name!r}"
                self.writer._report(f"cannot write {what}: {exc!r}")
        if lines:
            self.writer.write(lines[0] if len(lines) == 1 else b"".join(lines), len(lines))

    def shutdown(self) -> None:
        self.queue.close()
        self.writer.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        failed = self.writer.failed
        self.queue.flush()
        return self.writer.failed == failed


class SpoolLogRecordProcessor(LogRecordProcessor):
    """Log records (a task's prints and `logging`) as spool lines, in the queue of `spans`: a
    record emitted while a task runs is written with its execution span's end, before the task
    returns; any other within the queue's linger. With `spans.write_at_end` (the lineage mode, which
    has no execution span) each record is written by the thread that emits it."""

    def __init__(self, spans: SpoolSpanProcessor) -> None:
        self.spans = spans

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        # (the record as it is now: no processor after this one changes it)
        if self.spans.write_at_end:
            self.spans.queue.handle_now((LOGGED, log_record))
        else:
            self.spans.queue.append((LOGGED, log_record))

    def shutdown(self) -> None:
        """Writes what is queued; the span processor's shutdown closes the queue they share."""
        self.spans.queue.flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.spans.force_flush(timeout_millis)


# -- for benches, tests and operators ------------------------------------------------------------


def forwarder_pid(folder: str) -> int | None:
    """The pid of the folder's running forwarder, if one runs."""
    if not forwarder_running(folder):
        return None
    try:
        with open(os.path.join(folder, LOCK_FILE), "rb") as f:
            return int(f.read() or 0) or None
    except (OSError, ValueError):
        return None


def unsent_bytes(folder: str) -> int:
    """Bytes of span lines in the folder not yet acknowledged by the endpoint."""
    total = 0
    try:
        names = [name for name in os.listdir(folder) if name.endswith(SPOOL_SUFFIX)]
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            size = os.path.getsize(path)
            try:
                with open(path + ACK_SUFFIX, "rb") as f:
                    acked = int(f.read() or 0)
            except FileNotFoundError:
                with open(path, "rb") as f:
                    acked = len(f.readline())
        except (OSError, ValueError):
            continue  # deleted meanwhile: sent
        total += max(0, size - acked)
    return total
