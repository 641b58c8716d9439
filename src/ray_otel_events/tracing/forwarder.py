"""The spool's forwarder: one process per spool folder that sends what traced processes wrote there.

    python -m ray_otel_events.tracing.forwarder FOLDER     (started by tracing/spool.py, detached)

It reads each writer's spool file from where the endpoint last acknowledged it, maps task spans
(read back from their lines) to their RayEvents in each writer's order (`TaskSpanEvents`, one per
writer, as the writer's own processor would), writes the spans and the event log records with our
encoders (`otlp_span_encoder`, most lines straight from their fields without a span;
`task_records`) and the writers' own log records (a task's prints and `logging`, as the SDK's
exporter would have sent them: `log_record_wire`), and sends them over http/protobuf or grpc as
OTEL_EXPORTER_OTLP_PROTOCOL says (the log records where OTEL_EXPORTER_OTLP_LOGS_* and the other
variables of the SDK's log exporter say). A chunk counts as sent once all its requests were
answered with success; only then is its end written to `<file>.ack`, and a file is deleted once it
is complete (its writer let go of its lock) and acknowledged to its end. Retryable failures keep everything
and are tried again with backoff; a request refused for good is dropped and counted.

Bounded: past RAY_OTEL_EVENTS_SPOOL_MAX_BYTES the oldest complete files are deleted, their unsent
lines counted. Counters (exported, dropped by reason, failures) are logged and written to
`forwarder.stats.json`; problems go to `forwarder.log`, both in the folder. It exits once no
writer is left and everything is sent (after RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS), or when it
has failed for RAY_OTEL_EVENTS_FORWARDER_RETRY_SECONDS with no writer left: what is left waits for
the next process that installs the hook (and starts a forwarder). It runs at a lower priority
(RAY_OTEL_EVENTS_FORWARDER_NICE), so that it takes the cores the job leaves.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from ray_otel_events import native
from ray_otel_events.config import SpoolConfig, TracingConfig, otlp_export_config
from ray_otel_events.events.builders import EventFactory, TaskStatus, TaskType
from ray_otel_events.exporters.retry import SendError, is_retryable
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.otlp_span_encoder import plain_span_wire, resource_spans, span_field, span_wire
from ray_otel_events.otel.task_records import TaskEventRecords
from ray_otel_events.otel.task_spans import (
    SpanEvent,
    TaskDefinition,
    TaskFacts,
    TaskSpanEvents,
    TaskTransitions,
    UnmappableSpan,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.tracing.otlp_http import OtlpHttpPoster
from ray_otel_events.tracing.spool import (
    ACK_SUFFIX,
    ENDED,
    LOCK_FILE,
    LOGGED,
    PENDING_SUFFIX,
    SPOOL_SUFFIX,
    STARTED,
    STARTED_REF,
    STATS_FILE,
)
from ray_otel_events.tracing.task_events import PRODUCER

logger = logging.getLogger("ray_otel_events.forwarder")

try:  # the lines of most tasks read and written compiled (setup.py builds it where it can)
    from ray_otel_events.native import _spool_lines
except ImportError:
    _spool_lines = None  # type: ignore[assignment]
_compiled = _spool_lines is not None and native.ENABLED
if _compiled:
    _spool_lines.bind(
        TaskDefinition,
        TaskTransitions,
        (
            RayEvent.TASK_DEFINITION_EVENT,
            TaskType.NORMAL_TASK,
            TaskStatus.PENDING_ARGS_AVAIL,
            TaskStatus.SUBMITTED_TO_WORKER,
            TaskStatus.RUNNING,
            TaskStatus.FINISHED,
        ),
    )

# Lines read and sent at a time: the event records made from 256 KiB of lines stay well under the
# 4 MiB a gRPC server takes by default.
CHUNK_BYTES = 256 * 1024
ACTIVE_POLL_S = 0.05
IDLE_POLL_S = 0.2
MAX_BACKOFF_S = 5.0
STALE_PENDING_S = 60.0
EVENT_LOGS_ENV = "RAY_OTEL_EVENTS_EVENT_LOGS"

# Counters (stage "spool_forwarder"): exported_spans, exported_records (event records),
# exported_log_records (the writers' own), dropped_spans / dropped_records / dropped_log_records
# (reason=rejected), dropped_lines (reason=spool_full|torn|unreadable|invalid:
# unreadable, no span can be read from the line; invalid, the span's RayEvents cannot hold its
# values, and the whole line is dropped),
# retryable_failures (signal=...), unmapped_spans.


class Sender(Protocol):
    def send_once(self, body: bytes) -> None: ...


def senders_from_env(counters: Counters) -> dict[str, Sender]:
    """A sender per signal, over the protocol OTEL_EXPORTER_OTLP_(signal_)PROTOCOL names."""
    out: dict[str, Sender] = {}
    for signal_name in ("traces", "logs"):
        config = otlp_export_config(signal_name)
        if config.protocol == "grpc":
            from ray_otel_events.tracing.otlp_grpc import OtlpGrpcSender

            out[signal_name] = OtlpGrpcSender(config, signal_name)
        else:
            out[signal_name] = OtlpHttpPoster(config, counters, exported="exported_" + signal_name)
    return out


class _SpooledSpan(ReadableSpan):
    """A span read back from its line, with the drop counts its writer recorded."""

    def __init__(self, *args: Any, dropped: tuple[int, int, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dropped = dropped

    @property
    def dropped_attributes(self) -> int:
        return self._dropped[0]

    @property
    def dropped_events(self) -> int:
        return self._dropped[1]

    @property
    def dropped_links(self) -> int:
        return self._dropped[2]


@dataclass
class _Writer:
    """What the forwarder keeps per writing process: its resource, its mapper, its scopes."""

    resource: Resource
    resource_wire: bytes
    mapper: TaskSpanEvents
    scopes: dict[tuple[str, str, str], InstrumentationScope] = field(default_factory=dict)
    started_refs: set[int] = field(default_factory=set)  # starts whose end line is still to come
    # for the compiled path: its scopes by their three strings as written, its records' templates
    scope_of: dict[bytes, InstrumentationScope] = field(default_factory=dict)
    templates: dict[bytes, Any] = field(default_factory=dict)

    def scope(self, name: str, version: str, schema_url: str) -> InstrumentationScope:
        if type(name) is not str or type(version) is not str or type(schema_url) is not str:
            # (a line's own fault: it is dropped, not a request that cannot be written)
            raise TypeError(
                f"a scope's name, version and schema url are strings: {(name, version, schema_url)!r}"
            )
        key = (name, version, schema_url)
        scope = self.scopes.get(key)
        if scope is None:
            scope = self.scopes[key] = InstrumentationScope(name, version or None, schema_url or None)
        return scope


@dataclass
class _File:
    path: str
    fd: int
    writer: _Writer
    offset: int  # acknowledged up to here
    complete: bool = False  # its writer let go of it: nothing more will be appended
    # A chunk made but not yet fully acknowledged: its end, and the requests still to send.
    pending_end: int = 0
    pending: list[tuple[str, bytes, int, str]] = field(default_factory=list)  # (signal, body, items, what)
    unsent_since: float | None = None  # when lines were first seen waiting (`SpoolConfig.linger_s`)


def _trace_state(header: str) -> TraceState | None:
    return TraceState.from_header([header]) if header else None


_SPAN_KINDS = {kind.value: kind for kind in SpanKind}
_UNSET = Status(StatusCode.UNSET)


def span_from_line(record: list[Any], writer: _Writer, mark: bool) -> ReadableSpan:
    """The span a spool line (`spool.span_line`) was written from."""
    (
        _,
        name,
        trace_high,
        trace_low,
        span_id,
        flags,
        trace_state,
        parent_id,
        parent_remote,
        kind,
        start,
        end,
        code,
        description,
        attributes,
        events,
        links,
        scope_name,
        scope_version,
        scope_schema,
        dropped_attributes,
        dropped_events,
        dropped_links,
    ) = record
    trace_id = trace_high << 64 | trace_low
    context = SpanContext(trace_id, span_id, False, TraceFlags(flags), _trace_state(trace_state))
    parent = SpanContext(trace_id, parent_id, bool(parent_remote)) if parent_id else None
    if mark and name.endswith((semconv.EXECUTE_SUFFIX, semconv.SUBMIT_SUFFIX)):
        attributes[semconv.PRODUCER_ATTR] = PRODUCER  # their events travel as our records
    return _SpooledSpan(
        name,
        context,
        parent,
        writer.resource,
        attributes,
        [Event(e_name, e_attributes, e_time) for e_name, e_time, e_attributes in events] if events else (),
        [
            Link(
                SpanContext(int(l_trace, 16), l_span, l_remote, TraceFlags(l_flags), _trace_state(l_state)),
                l_attrs,
            )
            for l_trace, l_span, l_flags, l_state, l_attrs, l_remote in links
        ]
        if links
        else (),
        _SPAN_KINDS.get(kind) or SpanKind(kind),
        None,
        Status(StatusCode(code), description or None) if code else _UNSET,
        start,
        end,
        writer.scope(scope_name, scope_version, scope_schema),
        dropped=(dropped_attributes, dropped_events, dropped_links),
    )


_TASK_SUFFIXES = (semconv.EXECUTE_SUFFIX, semconv.SUBMIT_SUFFIX)


def log_record_wire(record: list[Any], writer: _Writer) -> tuple[bytes, InstrumentationScope]:
    """The OTLP LogRecord a log record's line (`spool.log_record_line`) was written from, as the
    SDK's exporter writes it, and its scope; a value of the wrong type or range raises."""
    (
        _,
        time_ns,
        observed_ns,
        severity_number,
        severity_text,
        body,
        attributes,
        trace_high,
        trace_low,
        span_id,
        flags,
        scope_name,
        scope_version,
        scope_schema,
        dropped_attributes,
        event_name,
    ) = record
    if type(attributes) is not dict:
        raise TypeError(f"a log record's attributes are an object: {attributes!r}")
    trace_id = trace_high << 64 | trace_low
    wire = otlp_wire.log_record_from_parts(
        time_unix_nano=time_ns or 0,
        observed_time_unix_nano=observed_ns or 0,
        severity_number=severity_number or 0,
        severity_text=severity_text or "",
        event_name=event_name or "",
        body=None if body is None else otlp_wire.any_value(body),
        attributes=otlp_wire.attributes(attributes, otlp_wire.LOG_RECORD_ATTRIBUTES),
        trace_id=trace_id.to_bytes(16, "big") if trace_id else b"",
        span_id=span_id.to_bytes(8, "big") if span_id else b"",
        flags=flags,
        dropped_attributes=dropped_attributes,
    )
    return wire, writer.scope(scope_name, scope_version, scope_schema)


def _plain_line(record: list[Any]) -> bool:
    """A line `plain_span_wire` writes: no trace state, events or links, UNSET or OK status, and
    fields of the types `span_from_line` would take (anything else goes through the span)."""
    return (
        not record[6]
        and not record[15]
        and not record[16]
        and record[12] in (0, 1)
        and type(record[9]) is int
        and 0 <= record[9] <= 4
        and type(record[14]) is dict
    )


def _plain_span_wire(record: list[Any], writer: _Writer, mark: bool) -> tuple[bytes, InstrumentationScope]:
    """`span_wire(span_from_line(record, writer, mark))` of a plain line (`_plain_line`), and
    its scope, without making the span."""
    name, attributes = record[1], record[14]
    if mark and name.endswith(_TASK_SUFFIXES):
        attributes[semconv.PRODUCER_ATTR] = PRODUCER
    wire = plain_span_wire(
        record[2].to_bytes(8, "big") + record[3].to_bytes(8, "big"),
        record[4].to_bytes(8, "big"),
        record[7],
        bool(record[8]),
        name,
        record[9],
        record[10],
        record[11],
        attributes,
        record[20],
        record[21],
        record[22],
        record[12] == 1,
    )
    return wire, writer.scope(record[17], record[18], record[19])


class _Chunk:
    """What one chunk's lines make: spans by scope (by the scope object's id), records in order,
    each as its request's entries (`ScopeSpans.spans`, `ScopeLogs.log_records`) already framed,
    one or many to a bytes object (the compiled pass hands over what it wrote in one)."""

    def __init__(self, data: bytes, now: int) -> None:
        self.data = data
        self.now = now  # the records' observed time
        self.by_scope: dict[int, tuple[InstrumentationScope | None, list[bytes]]] = {}
        self.log_records: list[bytes] = []
        self.spans = 0  # entries in by_scope's lists
        self.records = 0  # entries in log_records
        self.record_bytes = 0  # their size
        # the writer's own log records, as `ScopeLogs.log_records` entries by scope, and their count
        self.log_records_by_scope: dict[InstrumentationScope | None, list[bytes]] = {}
        self.own_records = 0
        self._ends: dict[Any, list[Any]] | None = None

    def ends(self) -> dict[Any, list[Any]]:
        """The chunk's ended spans' lines by span id (the last of each), read when first needed."""
        if self._ends is None:
            self._ends = {}
            for line in self.data.splitlines():
                with contextlib.suppress(ValueError):
                    record = orjson.loads(line)
                    if type(record) is list and len(record) > 4 and record[0] == ENDED:
                        with contextlib.suppress(TypeError):  # an id that is no key: no reference's
                            self._ends[record[4]] = record
        return self._ends


class Forwarder:
    """Sends one spool folder (see the module doc); `pass_once` is one sweep over its files."""

    def __init__(
        self,
        folder: str,
        spool: SpoolConfig,
        senders: dict[str, Sender],
        *,
        event_logs: bool = True,
        factory: Callable[[str | None], EventFactory] | None = None,
        counters: Counters | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.folder = folder
        self.clock = clock  # the records' observed time
        self.spool = spool
        self.senders = senders
        self.event_logs = event_logs
        # A writer's events in the session its header names (None: a header from before it did).
        self.factory = factory or (lambda session: EventFactory(session_name=session or ""))
        self.counters = counters if counters is not None else Counters("spool_forwarder")
        self.records = TaskEventRecords(
            otlp_wire.attributes({semconv.PRODUCER_ATTR: PRODUCER}, otlp_wire.LOG_RECORD_ATTRIBUTES)
        )
        self.scope_wire = otlp_wire.string_field(b"\x0a", semconv.INSTRUMENTATION_SCOPE)
        self.files: dict[str, _File] = {}
        self.live_writers = 0
        self.failing_since: float | None = None
        self._failures = 0
        self._reported: set[str] = set()

    # -- one sweep -------------------------------------------------------------------------------

    def pass_once(self) -> bool:
        """Send what the folder holds, file by file, until done or the endpoint fails; True if
        anything moved (sent, dropped or deleted)."""
        names = self._scan()
        moved = self._enforce_bound(names)
        by_writer: dict[str, list[str]] = {}
        for name in sorted(names):
            by_writer.setdefault(name.rsplit(".", 2)[0], []).append(name)
        self.live_writers = sum(
            1 for names in by_writer.values() if self._written_to(os.path.join(self.folder, names[-1]))
        )
        for writer_names in by_writer.values():
            for name in writer_names:
                state = self._open(os.path.join(self.folder, name))
                if state is None:
                    continue
                try:
                    done, sent = self._forward(state)
                except SendError:
                    return moved
                moved = moved or sent
                if not done:
                    break  # its later files wait for this one
                self._delete(state)
                moved = True
        return moved

    def _scan(self) -> list[str]:
        names = []
        now = time.time()
        for entry in os.scandir(self.folder):
            if entry.name.endswith(SPOOL_SUFFIX):
                names.append(entry.name)
            elif entry.name.endswith(PENDING_SUFFIX):
                with contextlib.suppress(OSError):  # a writer that died while creating it
                    if now - entry.stat().st_mtime > STALE_PENDING_S and self._unlocked(entry.path):
                        os.unlink(entry.path)
        return names

    def _written_to(self, path: str) -> bool:
        """True while a writer holds the file's lock. A file found complete holds the lock of this
        forwarder's own descriptor (taken to find it complete), which a second descriptor of this
        process cannot take either: known complete, it is not asked again."""
        state = self.files.get(path)
        return not (state is not None and state.complete) and not self._unlocked(path)

    @staticmethod
    def _unlocked(path: str) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def _open(self, path: str) -> _File | None:
        state = self.files.get(path)
        if state is not None:
            return state
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            first = os.pread(fd, 65536, 0)
            newline = first.find(b"\n")
            header = orjson.loads(first[:newline]) if newline > 0 else None
            if not isinstance(header, dict):
                raise ValueError("no header line")
            attributes = header.get("resource") or {}
            schema_url = header.get("schema_url") or None
            if not isinstance(attributes, dict) or not isinstance(schema_url, str | None):
                raise ValueError("a header whose resource is no object or schema URL no string")
            session = header.get("session")
            if not isinstance(session, str | None):
                raise ValueError("a header whose session is no string")
            resource = Resource(attributes, schema_url)
            writer = _Writer(
                resource,
                otlp_wire.attributes(attributes, b"\x0a") or b"",
                TaskSpanEvents(self.factory(session)),
            )
            offset = newline + 1
            with contextlib.suppress(OSError, ValueError), open(path + ACK_SUFFIX, "rb") as ack:
                offset = max(offset, int(ack.read() or 0))
        except Exception as exc:  # whatever another process wrote there
            os.close(fd)
            if self._unlocked(path):  # complete and unreadable: nothing will ever come of it
                self._report("unreadable", f"{path}: {exc}")
                self.counters.add("dropped_lines", 1, reason="unreadable")
                self._unlink(path)
            return None
        state = self.files[path] = _File(path, fd, writer, offset)
        return state

    def _forward(self, state: _File) -> tuple[bool, bool]:
        """Send this file's next chunks; (complete and all sent, anything sent). Raises SendError
        when the endpoint fails in a way that may heal."""
        sent = False
        while True:
            if state.pending:
                self._send_pending(state)
                sent = True
                continue
            if not state.complete:
                try:
                    fcntl.flock(state.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    state.complete = True  # checked before reading: what we read next is all of it
                except BlockingIOError:
                    pass
            if not state.complete and self._lingers(state):
                return False, sent
            data = os.pread(state.fd, CHUNK_BYTES, state.offset)
            end = data.rfind(b"\n") + 1
            if end == 0:
                if state.complete and data:
                    self.counters.add("dropped_lines", 1, reason="torn")  # its writer died mid-write
                    state.offset += len(data)
                return state.complete, sent
            state.pending_end = state.offset + end
            self._make_requests(state, data[:end])

    def _lingers(self, state: _File) -> bool:
        """True while a file still being written holds less than `linger_bytes` unsent, first seen
        less than `linger_s` ago: its lines wait to go in fewer, larger requests."""
        linger_s = self.spool.linger_s
        unsent = os.fstat(state.fd).st_size - state.offset if linger_s > 0 else 0
        if unsent <= 0 or unsent >= self.spool.linger_bytes:
            state.unsent_since = None
            return False
        now = time.monotonic()
        if state.unsent_since is None:
            state.unsent_since = now
        if now - state.unsent_since < linger_s:
            return True
        state.unsent_since = None
        return False

    def _make_requests(self, state: _File, data: bytes) -> None:
        """The chunk's requests: each line's span (`ScopeSpans.spans` entries by scope) and the
        records of the events it implies, in line order. The compiled path (`_spool_lines`, whose
        twin is `_line`) takes the lines it was written for and hands each other line here."""
        writer = state.writer
        chunk = _Chunk(data, self.clock())
        if _compiled and b"\r" not in data:  # (splitlines would also split there)
            mapper = writer.mapper
            open_by_span, open_by_ray_id = mapper.open_tasks()
            factory = mapper.factory
            records = self.records

            def miss(facts: TaskFacts, trace_id: bytes, span_id: bytes, flags: int) -> tuple[bytes, Any]:
                return records.record_and_template(factory, facts, trace_id, span_id, flags, chunk.now)

            context: tuple[Any, ...] = (
                chunk.by_scope,
                writer.scope_of,
                writer.scope,
                chunk.log_records,
                open_by_span,
                open_by_ray_id,
                writer.started_refs,
                writer.templates,
                miss,
                self.event_logs,
                chunk.now,
                [],
            )
            pos, size = 0, len(data)
            while pos < size:
                pos, spans_made, records_made, record_bytes = _spool_lines.process(data, pos, context)
                chunk.spans += spans_made
                chunk.records += records_made
                chunk.record_bytes += record_bytes
                if pos >= size:
                    break
                newline = data.find(b"\n", pos)
                if newline < 0:
                    newline = size
                self._line(state, chunk, data[pos:newline])
                pos = newline + 1
        else:
            for line in data.splitlines():
                self._line(state, chunk, line)
        pending: list[tuple[str, bytes, int, str]] = []
        if chunk.spans:
            groups = dict(chunk.by_scope.values())
            pending.append(("traces", resource_spans(writer.resource, groups), chunk.spans, "spans"))
        if chunk.records:
            body = otlp_wire.logs_request_of_entries(
                writer.resource_wire, self.scope_wire, chunk.log_records, chunk.record_bytes
            )
            pending.append(("logs", body, chunk.records, "records"))
        if chunk.own_records:  # (a ResourceLogs is written as a ResourceSpans: the same fields)
            body = resource_spans(writer.resource, chunk.log_records_by_scope)
            pending.append(("logs", body, chunk.own_records, "log_records"))
        state.pending = pending
        if not pending:
            self._ack(state, state.offset + len(data))

    def _line(self, state: _File, chunk: _Chunk, line: bytes) -> None:
        """One line's span and records into the chunk's (the compiled path's twin)."""
        writer = state.writer
        mapper = writer.mapper
        event_logs = self.event_logs
        try:
            record = orjson.loads(line)
        except ValueError as exc:
            self.counters.add("dropped_lines", 1, reason="unreadable")
            self._report("unreadable", f"{state.path}: a line that is not JSON: {exc!r}")
            return
        if type(record) is list and record and record[0] == LOGGED:
            self._log_record(state, chunk, record)
            return
        # An execution span's start is mostly a reference to its end line in the same write: the
        # RUNNING record is made from the ended span there. A reference whose end is in a later
        # chunk is kept for it.
        start_first = False
        span: ReadableSpan | None = None
        scope: InstrumentationScope | None = None
        try:
            kind = record[0]
            if kind == STARTED_REF:
                later = chunk.ends().get(record[1])
                if later is None:
                    writer.started_refs.add(record[1])
                    return
                span = span_from_line(later, writer, event_logs)
                kind = STARTED
            elif kind == ENDED:
                mapped = event_logs and record[1].endswith(_TASK_SUFFIXES)
                plain = _plain_line(record)
                if mapped or not plain:  # (its own line's span, whatever line its start referred to)
                    span = span_from_line(record, writer, event_logs)
                # the span as the endpoint gets it, from its line where the line is plain
                if plain:
                    wire, scope = _plain_span_wire(record, writer, event_logs)
                else:
                    assert span is not None
                    wire, scope = span_wire(span), span.instrumentation_scope or None
                start_first = record[4] in writer.started_refs
                writer.started_refs.discard(record[4])
                if not mapped:
                    span = None
            else:
                span = span_from_line(record, writer, event_logs)
        except Exception as exc:  # any value, of any type, another process may have written
            self.counters.add("dropped_lines", 1, reason="unreadable")
            self._report("unreadable", f"{state.path}: a line that is not a span: {exc!r}")
            return
        records: list[bytes] = []
        if event_logs and span is not None:
            events: list[SpanEvent] = []
            try:
                try:
                    if kind == ENDED and start_first:
                        events.extend(mapper.started(span))
                    events.extend(mapper.started(span) if kind == STARTED else mapper.ended(span))
                except UnmappableSpan:
                    self.counters.add("unmapped_spans", 1)
                record_of = self.records.record
                records = [record_of(item, chunk.now) for item in events]
            except Exception as exc:  # a value no RayEvent holds (a negative pid, an id too long)
                self.counters.add("dropped_lines", 1, reason="invalid")
                self._report("invalid", f"{state.path}: a span line no RayEvent can be made of: {exc!r}")
                return
        if kind == ENDED:
            # by object: a writer's scopes are one object per (name, version, schema url)
            group = chunk.by_scope.get(id(scope))
            if group is None:
                group = chunk.by_scope[id(scope)] = (scope, [])
            group[1].append(span_field(wire))
            chunk.spans += 1
        if records:
            entries = otlp_wire.log_record_entries(records)
            chunk.log_records.append(entries)
            chunk.records += len(records)
            chunk.record_bytes += len(entries)

    def _log_record(self, state: _File, chunk: _Chunk, record: list[Any]) -> None:
        """A writer's own log record into the chunk's."""
        try:
            wire, scope = log_record_wire(record, state.writer)
        except Exception as exc:  # any value, of any type, another process may have written
            self.counters.add("dropped_lines", 1, reason="unreadable")
            self._report("unreadable", f"{state.path}: a line that is not a log record: {exc!r}")
            return
        group = chunk.log_records_by_scope.get(scope)
        if group is None:
            group = chunk.log_records_by_scope[scope] = []
        group.append(span_field(wire))  # (`ScopeLogs.log_records` is `ScopeSpans.spans`' field 2)
        chunk.own_records += 1

    def _send_pending(self, state: _File) -> None:
        while state.pending:
            signal_name, body, items, what = state.pending[0]
            try:
                self.senders[signal_name].send_once(body)
                self.counters.add(f"exported_{what}", items)
            except Exception as exc:
                if is_retryable(exc):
                    self._failed(signal_name, exc)
                    raise exc if isinstance(exc, SendError) else SendError(str(exc), "error", True) from exc
                self.counters.add(f"dropped_{what}", items, reason="rejected")
                self._report(f"rejected-{signal_name}", f"{items} {what} refused: {exc}")
            state.pending.pop(0)
            self.failing_since, self._failures = None, 0
        self._ack(state, state.pending_end)

    def _ack(self, state: _File, offset: int) -> None:
        state.offset = offset
        tmp = state.path + ACK_SUFFIX + ".tmp"
        with open(tmp, "wb") as f:
            f.write(str(offset).encode())
        os.replace(tmp, state.path + ACK_SUFFIX)

    def _failed(self, signal_name: str, exc: BaseException) -> None:
        self.counters.add("retryable_failures", 1, signal=signal_name)
        self._failures += 1
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            logger.warning(
                "ray_otel_events forwarder: %s not delivered, kept in the spool: %s", signal_name, exc
            )

    def backoff_s(self) -> float:
        return min(MAX_BACKOFF_S, 0.1 * 2 ** min(self._failures, 8)) if self._failures else 0.0

    def _delete(self, state: _File) -> None:
        os.close(state.fd)
        self.files.pop(state.path, None)
        self._unlink(state.path)

    @staticmethod
    def _unlink(path: str) -> None:
        for name in (path, path + ACK_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def _enforce_bound(self, names: list[str]) -> bool:
        """Delete the oldest complete files while the spool is over its bound; count their lines."""
        sizes = {}
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(self.folder, name))
                sizes[name] = (st.st_mtime, st.st_size)
        total = sum(size for _, size in sizes.values())
        if total <= self.spool.max_bytes:
            return False
        moved = False
        for name in sorted(sizes, key=lambda n: sizes[n][0]):
            if total <= self.spool.max_bytes:
                break
            path = os.path.join(self.folder, name)
            if self._written_to(path):
                continue  # still being written: its writer moves on at its rotation size
            state = self.files.pop(path, None)
            offset = state.offset if state is not None else 0
            if state is not None:
                os.close(state.fd)
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(offset)
                lines = f.read().count(b"\n") - (0 if offset else 1)  # the header is no span
                self.counters.add("dropped_lines", max(lines, 0), reason="spool_full")
                self._report("spool_full", f"spool over {self.spool.max_bytes} bytes: dropped {name}")
            self._unlink(path)
            names.remove(name)
            total -= sizes[name][1]
            moved = True
        return moved

    def _report(self, key: str, message: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            logger.error("ray_otel_events forwarder: %s (reported once)", message)

    def write_stats(self) -> None:
        path = os.path.join(self.folder, STATS_FILE)
        with open(path + ".tmp", "wb") as f:
            f.write(orjson.dumps({"pid": os.getpid(), "counters": self.counters.snapshot()}))
        os.replace(path + ".tmp", path)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        idle_since: float | None = None
        snapshot: object = None
        while not stop.is_set():
            if not os.path.isdir(self.folder):
                logger.warning("ray_otel_events forwarder: %s is gone; exiting", self.folder)
                return
            try:
                moved = self.pass_once()
            except Exception:
                logger.exception("ray_otel_events forwarder: a sweep failed")
                moved = False
            current = self.counters.snapshot()
            if current != snapshot:
                snapshot = current
                with contextlib.suppress(OSError):
                    self.write_stats()
            now = time.monotonic()
            drained = not self.files and self.live_writers == 0
            if moved or not drained:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            if idle_since is not None and now - idle_since >= self.spool.idle_s:
                return
            if (
                self.failing_since is not None
                and self.live_writers == 0
                and now - self.failing_since >= self.spool.retry_s
            ):
                logger.warning(
                    "ray_otel_events forwarder: endpoint failing for %.0f s with no writer left; "
                    "the spool waits for the next start",
                    now - self.failing_since,
                )
                return
            if self.failing_since is not None:
                stop.wait(self.backoff_s())
            elif not moved:
                stop.wait(ACTIVE_POLL_S if self.live_writers else IDLE_POLL_S)


def _hold_lock(folder: str, locked_fd: int | None) -> int | None:
    """This process becomes the folder's forwarder (with the lock its starter took, or taken
    here), or None if another already is."""
    fd = locked_fd
    if fd is None:
        fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
    os.set_inheritable(fd, False)
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    locked_fd = None
    if len(args) == 3 and args[1] == "--lock-fd" and args[2].isdigit():
        locked_fd = int(args[2])
        args = args[:1]
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(
            "usage: python -m ray_otel_events.tracing.forwarder SPOOL_FOLDER [--lock-fd FD]"
            " (an existing folder)",
            file=sys.stderr,
        )
        return 2
    folder = args[0]
    os.chdir(folder)  # pin no other folder (a Ray worker's working directory may go away)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s pid=%(process)d %(message)s")
    lock = _hold_lock(folder, locked_fd)
    if lock is None:
        return 0  # another forwarder has it
    spool = SpoolConfig.from_env()
    with contextlib.suppress(OSError):
        os.nice(spool.nice)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    tracing = TracingConfig.from_env()
    event_logs = tracing.event_logs is not False
    counters = Counters("spool_forwarder")
    forwarder = Forwarder(
        folder,
        spool,
        senders_from_env(counters),
        event_logs=event_logs,
        factory=lambda session: EventFactory(tracing.session_name if session is None else session),
        counters=counters,
    )
    forwarder.run(stop)
    with contextlib.suppress(OSError):
        forwarder.write_stats()
    left = sum(1 for name in os.listdir(folder) if name.endswith(SPOOL_SUFFIX))
    logger.warning(
        "ray_otel_events forwarder: exiting; %s; %d spool file(s) left",
        orjson.dumps(counters.snapshot()).decode(),
        left,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
