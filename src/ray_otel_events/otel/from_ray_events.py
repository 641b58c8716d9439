"""A Ray cluster's RayEvent stream as OpenTelemetry spans and log records.

What a Ray aggregator posts is a stream of pieces: one task attempt's transitions come from its
owner and from the worker that ran it, in different POSTs, in no fixed order, sometimes twice
(ray_live §3-§5). This module keeps a bounded, time-limited state per open entity and turns it
into spans once the entity is done:

* one trace per driver job, its id derived from the session name and the job id
  (`trace_id_for_job`), so every POST about a job lands in the same trace and a retried POST gives
  the same ids;
* a root span per driver job (CREATED -> FINISHED), a lifetime span per actor (first transition ->
  DEAD), and one span per task attempt (first transition -> FINISHED/FAILED) whose parent is the
  span of its `parentTaskId` (the job's root span for tasks without a parent);
* every state transition is a span event, sorted by its timestamp; a failure sets ERROR status and
  adds an `exception` event; Ray's ids are attributes in the hex form Ray's tracing uses;
* every event (node and worker events included) is also one log record (otel/log_records.py: the
  whole event as body) carrying the trace and span id of its entity's span.

A span is emitted when its entity reaches a terminal state and the pieces that usually trail it
have arrived (the definition; for tasks the executor's RUNNING), or `terminal_grace_s` after the
terminal state otherwise. An entity not updated for `entity_ttl_s`, one evicted because
`max_open_entities` are open, and everything still open at `flush()` (shutdown) is emitted as it
stands, marked `ray_otel_events.incomplete=true`. Events repeating an event id already seen are
ignored; pieces arriving after their entity's span left still become log records (counted as late).
"""

from __future__ import annotations

import functools
import hashlib
import re
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events import native
from ray_otel_events.events import ids
from ray_otel_events.events.builders import ActorState, JobState, TaskStatus, TaskType
from ray_otel_events.events.registry import event_type_label
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.event_heads import (
    ACTOR,
    JOB,
    PROFILE,
    TASK,
    EventHead,
    compiled_head,
    field_keeper,
    job_of,
    read_head,
)
from ray_otel_events.otel.log_records import parts_log_record, record_fields
from ray_otel_events.otel.posted_events import EventParts, event_parts
from ray_otel_events.protobuf import common_pb2
from ray_otel_events.protobuf._pool import field_numbers
from ray_otel_events.protobuf.events_actor_definition_event_pb2 import ActorDefinitionEvent
from ray_otel_events.protobuf.events_actor_lifecycle_event_pb2 import ActorLifecycleEvent
from ray_otel_events.protobuf.events_actor_task_definition_event_pb2 import ActorTaskDefinitionEvent
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_driver_job_definition_event_pb2 import DriverJobDefinitionEvent
from ray_otel_events.protobuf.events_driver_job_lifecycle_event_pb2 import DriverJobLifecycleEvent
from ray_otel_events.protobuf.events_task_definition_event_pb2 import TaskDefinitionEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent

PRODUCER = "bridge"  # value of semconv.PRODUCER_ATTR on the spans made here

# Counter names.
EVENTS = "events"  # labelled event_type
DUPLICATES = "duplicate_events"
LATE_EVENTS = "late_events"  # pieces of an entity whose span was already emitted
SPANS = "spans"  # labelled kind=task|actor|job, outcome=complete|incomplete
EVICTED = "evicted_open_entities"

_TASK_TERMINAL = frozenset({TaskStatus.FINISHED, TaskStatus.FAILED})
_ACTOR_TERMINAL = frozenset({ActorState.DEAD})
_JOB_TERMINAL = frozenset({JobState.FINISHED})
# Plain ints: the generated enum wrappers resolve each name in Python, on every access.
_DRIVER_TASK = int(TaskType.DRIVER_TASK)
_ACTOR_CREATION_TASK = int(TaskType.ACTOR_CREATION_TASK)
_FAILED = int(TaskStatus.FAILED)
_TERMINAL_STATES = {"task": _TASK_TERMINAL, "actor": _ACTOR_TERMINAL, "job": _JOB_TERMINAL}
_LIFECYCLE_CLASSES: dict[str, Any] = {
    "task": TaskLifecycleEvent,
    "actor": ActorLifecycleEvent,
    "job": DriverJobLifecycleEvent,
}
_TASK_RUNNING = frozenset({TaskStatus.RUNNING, TaskStatus.RUNNING_IN_RAY_GET, TaskStatus.RUNNING_IN_RAY_WAIT})
# Actor deaths that are how actors normally end; any other death is an error.
_NORMAL_ACTOR_DEATHS = frozenset(
    {
        common_pb2.ActorDiedErrorContext.OWNER_DIED,
        common_pb2.ActorDiedErrorContext.RAY_KILL,
        common_pb2.ActorDiedErrorContext.OUT_OF_SCOPE,
        common_pb2.ActorDiedErrorContext.REF_DELETED,
    }
)
try:  # the converter's core compiled (setup.py builds it where a C compiler is present)
    from ray_otel_events.native import _entity_spans
except ImportError:
    _entity_spans = None  # type: ignore[assignment]
# The core needs the compiled head reader's schema too (the pieces it keeps slim are read there).
_compiled = _entity_spans is not None and native.ENABLED and compiled_head is not None
_read_transitions = _entity_spans.transitions if _compiled else None
_SPAN_KIND_INTERNAL = 1
_STATUS_ERROR = 2
_NIL_TASK_ID = ids.nil_id(ids.TASK_ID_SIZE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")


# -- deterministic ids --------------------------------------------------------------------------


def _digest(*parts: bytes) -> bytes:
    return hashlib.sha256(b"\0".join(parts)).digest()


@functools.lru_cache(maxsize=4096)  # a few jobs, thousands of events each
def trace_id_for_job(session_name: str, job_id: bytes) -> bytes:
    """16 bytes: SHA-256("ray-otel-events/trace" NUL session NUL job id)[:16].

    The session is part of it because job ids restart at 01000000 in every Ray cluster.
    """
    return _digest(b"ray-otel-events/trace", session_name.encode(), job_id)[:16]


def job_span_id(session_name: str, job_id: bytes) -> bytes:
    return _digest(b"ray-otel-events/job", session_name.encode(), job_id)[:8]


@functools.lru_cache(maxsize=4096)  # a task's pieces and its span arrive close together
def task_span_id(session_name: str, task_id: bytes, attempt: int) -> bytes:
    return _digest(b"ray-otel-events/task", session_name.encode(), task_id, str(attempt).encode())[:8]


def actor_span_id(session_name: str, actor_id: bytes) -> bytes:
    return _digest(b"ray-otel-events/actor", session_name.encode(), actor_id)[:8]


def _is_nil(value: bytes) -> bool:
    return not value or value == b"\xff" * len(value)


# -- output -------------------------------------------------------------------------------------


class EmittedSpan(NamedTuple):  # a NamedTuple: made at half a frozen dataclass's cost
    session_name: str
    event_type: int  # the type whose entity the span describes (for counters)
    # The serialized Span, or, where the converter was given an `envelope`, the one-item
    # ResourceSpans holding it (what the exporter queues), the Span from `at` on.
    item: bytes
    entity: bytes = b""  # entity_key_bytes of the entity it closes (the durable queue's group)
    at: int = 0

    @property
    def wire(self) -> bytes:
        """The serialized Span."""
        return self.item[self.at :] if self.at else self.item

    @property
    def span(self) -> Span:
        return Span.FromString(self.wire)


class EmittedLog(NamedTuple):  # one per event: see EmittedSpan
    session_name: str
    event_type: int
    item: bytes  # a serialized LogRecord (otel/otlp_wire.py), or its one-item ResourceLogs
    at: int = 0

    @property
    def wire(self) -> bytes:
        """The serialized LogRecord."""
        return self.item[self.at :] if self.at else self.item

    @property
    def record(self) -> LogRecord:
        return LogRecord.FromString(self.wire)


# EmittedLog(...) and EmittedSpan(...) without the NamedTuple's generated __new__ (a Python frame).
_new_log = functools.partial(tuple.__new__, EmittedLog)
_new_span = functools.partial(tuple.__new__, EmittedSpan)


@dataclass(slots=True)
class Emitted:
    spans: list[EmittedSpan] = field(default_factory=list)
    logs: list[EmittedLog] = field(default_factory=list)
    # Events now held in an open entity, by entity_key_bytes: what a durable bridge keeps on disk
    # (their wire bytes) until that entity's span is emitted.
    taken: list[tuple[bytes, EventParts]] = field(default_factory=list)

    def extend(self, other: Emitted) -> None:
        self.spans.extend(other.spans)
        self.logs.extend(other.logs)
        self.taken.extend(other.taken)


# -- per-entity state ---------------------------------------------------------------------------

EntityKey = tuple[str, str, bytes, int]  # (kind, session, id, attempt)


def entity_key_bytes(key: EntityKey) -> bytes:
    """A durable, reversible form of an entity key (the id last: it may hold any byte)."""
    kind, session, ident, attempt = key
    return b"\0".join((kind.encode(), session.encode(), str(attempt).encode(), ident))


def entity_key_from_bytes(raw: bytes) -> EntityKey:
    kind, session, attempt, ident = raw.split(b"\0", 3)
    return kind.decode(), session.decode(), ident, int(attempt)


# Bytes an open entity costs beyond its stored pieces (the object, its key, two dict entries).
ENTITY_OVERHEAD_BYTES = 360


@dataclass(slots=True)
class _Entity:
    """An open entity holds its pieces as protobuf wire bytes, not messages: a third of the memory.

    Concatenated serialized payloads parse as their MergeFrom, so the lifecycle is one bytes value;
    `running` and `terminal` are kept on the side so readiness never parses it."""

    key: EntityKey
    lifecycle_type: int
    first_ns: int  # earliest event timestamp seen, for entities without transitions
    updated_at: float
    definition_wire: bytes | None = None  # the definition payload (first one wins)
    definition_cls: Any = None  # its message class (a task's may be an actor task's)
    lifecycle_wire: bytes = b""  # lifecycle payloads, concatenated
    running: bool = False  # a task saw a RUNNING* transition
    terminal: bool = False  # a terminal transition arrived
    terminal_at: float | None = None
    # An actor's and a job's, parsed when the span is built (_materialize).
    definition: Any = None
    lifecycle: Any = None

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def session(self) -> str:
        return self.key[1]

    @property
    def size(self) -> int:
        return ENTITY_OVERHEAD_BYTES + len(self.definition_wire or b"") + len(self.lifecycle_wire)


# The definition fields a task span reads. An open attempt keeps only these (and of the function,
# its names, not its hash or signature): the others (required resources, runtime env, label
# selectors, call site, ref ids) can be kilobytes per task.
_TASK_SPAN_FIELDS: dict[type, tuple[str, ...]] = {
    TaskDefinitionEvent: (
        "task_type",
        "task_func",
        "task_name",
        "job_id",
        "parent_task_id",
        "placement_group_id",
    ),
    ActorTaskDefinitionEvent: (
        "actor_func",
        "actor_task_name",
        "job_id",
        "actor_id",
        "parent_task_id",
        "placement_group_id",
    ),
}


def _without_id(wire: bytes, entity_id: bytes) -> bytes:
    """A lifecycle payload's wire bytes without its leading entity id (field 1, first on the wire),
    which every piece repeats and the entity's key holds."""
    n = len(entity_id)
    if 0 < n < 128 and wire[:2] == bytes((0x0A, n)) and wire[2 : 2 + n] == entity_id:
        return wire[2 + n :]
    return wire


def _piece_states(kind: str, wire: bytes) -> list[int]:
    """The states a lifecycle piece's transitions enter."""
    read = _read_transitions(wire, kind) if _read_transitions else None
    if read is not None:
        return [t[1] for t in read]
    return [t.state for t in _LIFECYCLE_CLASSES[kind].FromString(wire).state_transitions]


_LIFECYCLE_TYPES = {
    TASK: RayEvent.TASK_LIFECYCLE_EVENT,
    ACTOR: RayEvent.ACTOR_LIFECYCLE_EVENT,
    JOB: RayEvent.DRIVER_JOB_LIFECYCLE_EVENT,
}
_DEFINITION_CLASSES: dict[int, Any] = {
    RayEvent.TASK_DEFINITION_EVENT: TaskDefinitionEvent,
    RayEvent.ACTOR_TASK_DEFINITION_EVENT: ActorTaskDefinitionEvent,
    RayEvent.ACTOR_DEFINITION_EVENT: ActorDefinitionEvent,
    RayEvent.DRIVER_JOB_DEFINITION_EVENT: DriverJobDefinitionEvent,
}


_SPAN_KINDS = frozenset(_LIFECYCLE_TYPES)
# What an open entity keeps of a definition, by type: a task's slim (None: the whole payload).
_DEFINITION_KEEPERS: dict[int, Callable[[bytes], bytes] | None] = {
    event_type: field_keeper(cls, _TASK_SPAN_FIELDS[cls]) if cls in _TASK_SPAN_FIELDS else None
    for event_type, cls in _DEFINITION_CLASSES.items()
}


def _trace_context(head: EventHead) -> tuple[bytes, bytes]:
    """(trace id, span id) of the span an event belongs to; empty for node, worker and others."""
    kind = head.kind
    if not kind:
        return b"", b""
    return trace_id_for_job(head.session, head.job), _span_id_of(kind, head)


def _span_id_of(kind: str, head: EventHead) -> bytes:
    """The span id of an event of a span kind (or a profile event: its task's)."""
    if kind in (TASK, PROFILE):
        return task_span_id(head.session, head.entity_id, head.attempt)
    if kind == ACTOR:
        return actor_span_id(head.session, head.entity_id)
    return job_span_id(head.session, head.entity_id)


def routing_key(event: RayEvent) -> bytes:
    """The trace id of the span an event belongs to (its event id when it has none): what splits
    assembly over processes or machines so that every piece of one entity meets in one place."""
    return head_routing_key(read_head(event))


def head_routing_key(head: EventHead) -> bytes:
    """`routing_key` of an event's head."""
    trace, _ = _trace_context(head)
    return trace or head.event_id


def routing_groups(events: list[EventParts], workers: int) -> list[list[EventParts]]:
    """`events` split among `workers` processes (or machines), in their order: each goes to the one
    owning its trace, the first 8 bytes of its `head_routing_key`, big-endian, modulo `workers`."""
    if _compiled:
        return _entity_spans.route(events, workers)
    groups: list[list[EventParts]] = [[] for _ in range(workers)]
    for parts in events:
        groups[int.from_bytes(head_routing_key(parts.head)[:8], "big") % workers].append(parts)
    return groups


class _BoundedSet:
    """Remembers the most recent `size` keys."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.keys: OrderedDict[Any, None] = OrderedDict()  # oldest first (the converter's loop reads it)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def add(self, key: Any) -> None:
        self.keys[key] = None
        self.keys.move_to_end(key)
        if len(self.keys) > self.size:
            self.keys.popitem(last=False)


# -- the converter ------------------------------------------------------------------------------


class RayEventsToOtel:
    """Not thread-safe: one owner (the bridge's event loop) calls add/expire/flush.

    Where the compiled core is built (native/_entity_spans.c) it keeps the state and does the per-event
    work, this class's Python being its twin: `compiled=False` runs the Python (to compare)."""

    def __init__(
        self,
        *,
        max_open_entities: int = 100_000,
        max_open_bytes: int = 256 * 1024 * 1024,
        entity_ttl_s: float = 600.0,
        terminal_grace_s: float = 2.0,
        dedup_window: int = 200_000,
        clock: Callable[[], float] = time.monotonic,
        observed_clock_ns: Callable[[], int] = time.time_ns,
        counters: Counters | None = None,
        envelope: Callable[[str], tuple[bytes, bytes]] | None = None,
        compiled: bool = True,
    ) -> None:
        """`envelope`: the serialized (Resource, InstrumentationScope) of a session's spans and
        records, which are then emitted each in its one-item ResourceSpans / ResourceLogs, written
        once (what an exporter queues); without it they are emitted bare."""
        if max_open_entities <= 0 or max_open_bytes <= 0 or dedup_window <= 0:
            raise ValueError("max_open_entities, max_open_bytes and dedup_window must be > 0")
        self.max_open_entities = max_open_entities
        self.max_open_bytes = max_open_bytes
        self._open_bytes = 0  # sum of the open entities' `size`
        self.entity_ttl_s = entity_ttl_s
        self.terminal_grace_s = terminal_grace_s
        self.clock = clock
        self.observed_clock_ns = observed_clock_ns
        self.envelope = envelope
        self._last_envelope: tuple[str, tuple[bytes, bytes]] | None = None  # (session, its envelope)
        self.counters = counters if counters is not None else Counters("ray_events_to_otel")
        self._open: OrderedDict[EntityKey, _Entity] = OrderedDict()  # least recently updated first
        self._terminal: OrderedDict[EntityKey, float] = OrderedDict()  # waiting out the grace
        self._seen_event_ids = _BoundedSet(dedup_window)
        self._emitted = _BoundedSet(dedup_window)
        self._attempts: OrderedDict[tuple[str, bytes], int] = OrderedDict()  # latest attempt per task
        self._attempts_size = dedup_window
        self._span_counts: dict[tuple[str, bool], int] = {}  # (kind, complete): emitted, not yet counted
        self._core = (
            _entity_spans.Core(
                max_open_entities,
                max_open_bytes,
                entity_ttl_s,
                terminal_grace_s,
                dedup_window,
                clock,
                observed_clock_ns,
                envelope,
            )
            if compiled and _compiled
            else None
        )

    @property
    def compiled(self) -> bool:
        """Whether the compiled core does the work."""
        return self._core is not None

    @property
    def open_entities(self) -> int:
        return self._core.open_entities if self._core is not None else len(self._open)

    @property
    def open_bytes(self) -> int:
        """What the open entities hold: their stored pieces plus a fixed overhead each."""
        return self._core.open_bytes if self._core is not None else self._open_bytes

    def remember_emitted(self, keys: Iterable[EntityKey]) -> None:
        """Entities whose span a previous run emitted: their late pieces stay late after a restart."""
        if self._core is not None:
            self._core.remember_emitted(keys)
            return
        for key in keys:
            self._emitted.add(key)

    # -- input ---------------------------------------------------------------------------------

    def add(
        self,
        events: Iterable[RayEvent],
        logs: bool = True,
        assemble: bool = True,
        posted: Sequence[Mapping[str, Any] | None] = (),
    ) -> Emitted:
        """`add_parts` of RayEvents; `posted`: for each event, the JSON object it was read from
        when that holds the event as it is (else None), which its log record's body is then written
        from."""
        n_posted = len(posted)
        return self.add_parts(
            [
                event_parts(event, posted[index] if index < n_posted else None)
                for index, event in enumerate(events)
            ],
            logs,
            assemble,
        )

    def add_parts(self, events: list[EventParts], logs: bool = True, assemble: bool = True) -> Emitted:
        """Take events (in any order); returns their log records and the spans now complete.

        `logs=False`: no log records (a durable bridge's replay, whose records left before; an
        assemble-only stage, fed the records themselves). `assemble=False`: log records only (a
        convert-only stage; spans are assembled elsewhere, routed by trace id)."""
        if self._core is not None:
            spans, records, taken, counts = self._core.add(events, logs, assemble)
            self._add_counts(counts)
            return Emitted(spans, records, taken)
        out = Emitted()
        now = self.clock()
        touched: dict[EntityKey, _Entity] = {}
        # Each touched entity's entity_key_bytes, made once a batch (every held piece is filed under
        # it), and not kept on the entity: 138 bytes an open attempt.
        key_bytes: dict[EntityKey, bytes] = {}
        types: dict[int, int] = {}
        # The duplicate filter's and the emitted set's dicts are used directly: a method call an
        # event each was a tenth of this loop.
        seen, seen_size = self._seen_event_ids.keys, self._seen_event_ids.size
        emitted = self._emitted.keys
        logs_out, taken = out.logs, out.taken
        observed = self.observed_clock_ns
        for parts in events:
            head = parts[0]
            event_id = head.event_id
            if event_id:
                if event_id in seen:
                    self.counters.add(DUPLICATES)
                    continue
                seen[event_id] = None  # `_BoundedSet.add` of a new key
                if len(seen) > seen_size:
                    seen.popitem(last=False)
            event_type = head.event_type
            types[event_type] = types.get(event_type, 0) + 1
            kind = head.kind
            if logs:
                if kind:  # `_trace_context`, inlined
                    trace_id = trace_id_for_job(head.session, head.job)
                    span_id = _span_id_of(kind, head)
                else:
                    trace_id = span_id = b""
                source = parts[4]
                record = parts_log_record(
                    head,
                    parts[2],
                    parts[3],
                    source if source is not None else parts[1],
                    trace_id,
                    span_id,
                    observed(),
                )
                if self.envelope is None:
                    logs_out.append(_new_log((head.session, event_type, record, 0)))
                else:
                    item, at = self._item(head.session, record)
                    logs_out.append(_new_log((head.session, event_type, item, at)))
            if kind not in _SPAN_KINDS or not assemble:  # no span: node, worker, profile and others
                continue
            key = (kind, head.session, head.entity_id, head.attempt)
            if key in emitted:
                self.counters.add(LATE_EVENTS, kind=kind)
                continue
            touched[key] = self._update(key, head, now)
            filed = key_bytes.get(key)
            if filed is None:
                filed = key_bytes[key] = entity_key_bytes(key)
            taken.append((filed, parts))
        for event_type, count in types.items():
            self.counters.add(EVENTS, count, event_type=event_type_label(event_type))
        # Readiness is judged once the whole batch is in: the pieces of one POST arrive together.
        for entity in touched.values():
            if entity.terminal:
                self._check_terminal(entity, now, out)
        self._evict_over_bounds(out)
        self._count_spans()
        return out

    def _update(self, key: EntityKey, head: EventHead, now: float) -> _Entity:
        """Add one piece to its entity (opened here if new); returns the entity."""
        entity = self._open.get(key)
        event_ns = head.time_ns
        if entity is None:
            entity = _Entity(key, _LIFECYCLE_TYPES[key[0]], event_ns, now)
            self._open[key] = entity
            self._open_bytes += ENTITY_OVERHEAD_BYTES
        else:
            if event_ns < entity.first_ns:
                entity.first_ns = event_ns
            entity.updated_at = now
            self._open.move_to_end(key)
        # `_open_bytes` follows `entity.size`: what the entity's pieces grow by is added.
        definition_cls = _DEFINITION_CLASSES.get(head.event_type)
        if definition_cls is None:
            self._open_bytes += self._merge_lifecycle(entity, head.payload)
        elif entity.definition_wire is None:  # the first one wins
            keep = _DEFINITION_KEEPERS[head.event_type]
            entity.definition_wire = head.payload if keep is None else keep(head.payload)
            entity.definition_cls = definition_cls
            self._open_bytes += len(entity.definition_wire)
        if key[3] > 0:  # a task's retry (only tasks have attempts)
            self._note_attempt(key[1], key[2], key[3])
        return entity

    def _evict_over_bounds(self, out: Emitted) -> None:
        """The least recently updated entities leave as incomplete spans while a bound is passed."""
        while len(self._open) > self.max_open_entities or (
            self._open_bytes > self.max_open_bytes and len(self._open) > 1
        ):
            reason = "entities" if len(self._open) > self.max_open_entities else "bytes"
            self.counters.add(EVICTED, reason=reason)
            self._emit(next(iter(self._open.values())), out)

    def _check_terminal(self, entity: _Entity, now: float, out: Emitted) -> None:
        """Emit a terminal entity that is complete, or start its grace period."""
        if not entity.terminal:
            return
        if self._ready(entity):
            self._emit(entity, out)
        elif entity.terminal_at is None:
            entity.terminal_at = now
            self._terminal[entity.key] = now

    @staticmethod
    def _merge_lifecycle(entity: _Entity, wire: bytes) -> int:
        """Append a lifecycle piece; returns how many bytes the entity grew by."""
        kind, _, entity_id, _ = entity.key  # not the `kind` property: a call a piece
        piece = _without_id(wire, entity_id)
        entity.lifecycle_wire += piece
        states = _piece_states(kind, wire)
        terminal_states = _TERMINAL_STATES[kind]
        for state in states:
            if state in terminal_states:
                entity.terminal = True
            elif state in _TASK_RUNNING and kind == TASK:
                entity.running = True
        return len(piece)

    def _note_attempt(self, session: str, task_id: bytes, attempt: int) -> None:
        """Only retries are remembered: no entry means attempt 0, most tasks' only one."""
        key = (session, task_id)
        if self._attempts.get(key, 0) < attempt:
            self._attempts[key] = attempt
        self._attempts.move_to_end(key)
        if len(self._attempts) > self._attempts_size:
            self._attempts.popitem(last=False)

    # -- readiness -----------------------------------------------------------------------------

    @staticmethod
    def _transitions(entity: _Entity) -> list[tuple[int, int, Any]]:
        """(timestamp ns, state, transition) sorted by time, repeats of (state, time) removed; the
        transition is None where it is read from the wire (all but actors, whose spans read it)."""
        if not entity.lifecycle_wire:
            return []
        kind = entity.key[0]
        if _read_transitions is not None and kind != ACTOR:
            read: list[tuple[int, int, Any]] | None = _read_transitions(entity.lifecycle_wire, kind)
            if read is not None:
                return read
        seen: set[tuple[int, int]] = set()
        out: list[tuple[int, int, Any]] = []
        lifecycle = entity.lifecycle or _LIFECYCLE_CLASSES[kind].FromString(entity.lifecycle_wire)
        for t in lifecycle.state_transitions:
            ns = otlp_wire.unix_nano(t.timestamp)
            if (ns, t.state) in seen:
                continue
            seen.add((ns, t.state))
            out.append((ns, t.state, t))
        out.sort(key=lambda item: item[0])
        return out

    @staticmethod
    def _terminal_state(transitions: list[tuple[int, int, Any]], kind: str) -> tuple[int, int, Any] | None:
        """The first terminal one of an entity's `_transitions`, if any."""
        terminal_states = _TERMINAL_STATES[kind]
        for item in transitions:
            if item[1] in terminal_states:
                return item
        return None

    @staticmethod
    def _ready(entity: _Entity) -> bool:
        if entity.definition_wire is None:
            return False
        return entity.key[0] != TASK or entity.running

    # -- time limits and shutdown ----------------------------------------------------------------

    def expire(self) -> Emitted:
        """Spans whose grace after the terminal state passed, and open entities past their TTL."""
        if self._core is not None:
            return self._core_spans(*self._core.expire())
        out = Emitted()
        now = self.clock()
        while self._terminal:
            key, since = next(iter(self._terminal.items()))
            if now - since < self.terminal_grace_s:
                break
            self._emit(self._open[key], out)
        while self._open:
            entity = next(iter(self._open.values()))
            if now - entity.updated_at < self.entity_ttl_s:
                break
            self._emit(entity, out)
        self._count_spans()
        return out

    def flush(self) -> Emitted:
        """Everything still open, as it stands (shutdown)."""
        if self._core is not None:
            return self._core_spans(*self._core.flush())
        out = Emitted()
        while self._open:
            self._emit(next(iter(self._open.values())), out)
        self._count_spans()
        return out

    # -- spans ---------------------------------------------------------------------------------

    def _emit(self, entity: _Entity, out: Emitted) -> None:
        key = entity.key
        kind = key[0]
        del self._open[key]
        self._open_bytes -= entity.size
        if self._terminal:
            self._terminal.pop(key, None)
        self._emitted.add(key)
        if kind == TASK:  # a task's span reads its pieces' wire bytes (`_task_parts`)
            transitions = self._transitions(entity)
            terminal = self._terminal_state(transitions, kind)
            span = self._task_span(entity, terminal, transitions)
            complete = terminal is not None
        else:
            span, complete = _other_span(entity)
        counted = (kind, complete)
        self._span_counts[counted] = self._span_counts.get(counted, 0) + 1
        item, at = self._item(key[1], span.wire())
        out.spans.append(_new_span((key[1], entity.lifecycle_type, item, entity_key_bytes(key), at)))

    def _item(self, session: str, wire: bytes) -> tuple[bytes, int]:
        """(the item, where `wire` starts in it): `wire` in the envelope of its session, if any."""
        if self.envelope is None:
            return wire, 0
        last = self._last_envelope  # a stream's sessions come in runs: asked once a run
        if last is None or last[0] != session:
            last = self._last_envelope = (session, self.envelope(session))
        item = otlp_wire.resource_logs(*last[1], [wire])
        return item, len(item) - len(wire)

    def _core_spans(self, spans: list[EmittedSpan], counts: tuple[Any, ...]) -> Emitted:
        self._add_counts(counts)
        return Emitted(spans)

    def _add_counts(self, counts: tuple[Any, ...]) -> None:
        """The compiled core's counts of one call, added as the Python's are."""
        duplicates, late, types, spans, evicted = counts
        add = self.counters.add
        add(DUPLICATES, duplicates)
        for kind, count in late.items():
            add(LATE_EVENTS, count, kind=kind)
        for event_type, count in types.items():
            add(EVENTS, count, event_type=event_type_label(event_type))
        for reason, count in evicted.items():
            add(EVICTED, count, reason=reason)
        self._span_counts = spans
        self._count_spans()

    def _count_spans(self) -> None:
        """Add the spans `_emit` counted to SPANS: once a call, not once a span (a lock each)."""
        for (kind, complete), count in self._span_counts.items():
            self.counters.add(SPANS, count, kind=kind, outcome="complete" if complete else "incomplete")
        self._span_counts.clear()

    @staticmethod
    def _materialize(entity: _Entity) -> None:
        """Parse the stored pieces into the payload messages the span builders read."""
        if entity.definition_wire is not None:
            entity.definition = entity.definition_cls.FromString(entity.definition_wire)
        if entity.lifecycle_wire:
            entity.lifecycle = _LIFECYCLE_CLASSES[entity.kind].FromString(entity.lifecycle_wire)

    def _task_parent(self, session: str, job: bytes, parent_task: bytes) -> bytes:
        if _is_nil(parent_task) or parent_task == _NIL_TASK_ID:
            return job_span_id(session, job)
        attempt = self._attempts.get((session, parent_task), 0)
        return task_span_id(session, parent_task, attempt)

    def _task_span(
        self, entity: _Entity, terminal: tuple[int, int, Any] | None, transitions: list[tuple[int, int, Any]]
    ) -> _SpanWire:
        _, session, task_id, attempt = entity.key
        p = _task_parts(entity)
        job = job_of(TASK, task_id, p.job_id or p.lifecycle_job_id)
        attrs: dict[str, Any] = {
            semconv.RAY_TASK_ID: task_id.hex(),
            semconv.RAY_TASK_ATTEMPT: attempt,
            semconv.RAY_JOB_ID: job.hex(),
        }
        defined = entity.definition_cls is not None
        actor_id = p.actor_id
        name = p.name
        if entity.definition_cls is TaskDefinitionEvent:
            name = name or ("driver" if p.task_type == _DRIVER_TASK else "")
            attrs[semconv.RAY_FUNCTION] = p.function
            attrs["ray.task_type"] = _enum_name(TaskType, p.task_type)
            if p.task_type == _ACTOR_CREATION_TASK:
                actor_id = ids.actor_of_task(task_id)
        elif defined:  # ActorTaskDefinitionEvent
            attrs[semconv.RAY_FUNCTION] = p.function
            attrs["ray.task_type"] = "ACTOR_TASK"
        if actor_id:
            attrs[semconv.RAY_REMOTE] = "actor"
            attrs[semconv.RAY_ACTOR_ID] = actor_id.hex()
            cls, _, method = name.rpartition(":")[2].rpartition(".")
            if cls:
                attrs[semconv.RAY_ACTOR_CLASS] = cls
                attrs[semconv.RAY_ACTOR_METHOD] = method
        elif defined:
            attrs[semconv.RAY_REMOTE] = "function"
        if name:
            attrs[semconv.RAY_TASK_NAME] = name
        parent_task = p.parent_task_id
        parent = self._task_parent(session, job, parent_task)  # the job's root span when nil
        if not _is_nil(parent_task):
            attrs[semconv.RAY_PARENT_TASK_ID] = parent_task.hex()
        if defined and not _is_nil(p.placement_group_id):
            attrs[semconv.RAY_PLACEMENT_GROUP_ID] = p.placement_group_id.hex()
        _where_ran(attrs, p.node_id, p.worker_id, p.worker_pid)
        failed = terminal is not None and terminal[1] == _FAILED
        if failed and p.error_type is not None:
            attrs["ray.error_type"] = _enum_name(common_pb2.ErrorType, p.error_type)
        trace_id = trace_id_for_job(session, job)
        span = _base_span(
            entity,
            terminal,
            transitions,
            trace_id,
            task_span_id(session, task_id, attempt),
            parent,
            name or f"task {task_id.hex()}",
            _task_state_name,
            attrs,
        )
        if actor_id:
            actor_trace = trace_id_for_job(session, job_of(ACTOR, actor_id, job))
            span.links.append(_link(actor_trace, actor_span_id(session, actor_id)))
        if attempt > 0:
            span.links.append(_link(trace_id, task_span_id(session, task_id, attempt - 1)))
        if failed and terminal is not None:
            error_type = attrs.get("ray.error_type", "TASK_FAILED")
            event, span.status = _task_failure(terminal[0], p.error_message, error_type)
            span.events.append(event)
        return span


# -- spans of actors and jobs, and what every span shares ------------------------------------------


def _actor_span(
    entity: _Entity, terminal: tuple[int, int, Any] | None, transitions: list[tuple[int, int, Any]]
) -> _SpanWire:
    _, session, actor_id, _ = entity.key
    d = entity.definition
    job = job_of(ACTOR, actor_id, d.job_id if d is not None else b"")
    attrs: dict[str, Any] = {
        semconv.RAY_ACTOR_ID: actor_id.hex(),
        semconv.RAY_JOB_ID: job.hex(),
        semconv.RAY_REMOTE: "actor",
    }
    class_name = ""
    if d is not None:
        class_name = d.class_name
        attrs[semconv.RAY_ACTOR_CLASS] = d.class_name
        if d.name:
            attrs["ray.actor_name"] = d.name
        if d.ray_namespace:
            attrs["ray.namespace"] = d.ray_namespace
        attrs["ray.actor_is_detached"] = d.is_detached
    for _, _, t in transitions:
        _where_ran(attrs, t.node_id, t.worker_id, t.pid)
        if t.repr_name:
            attrs["ray.actor_repr_name"] = t.repr_name
    span = _base_span(
        entity,
        terminal,
        transitions,
        trace_id_for_job(session, job),
        actor_span_id(session, actor_id),
        job_span_id(session, job),
        f"actor {class_name or actor_id.hex()}",
        _actor_state_name,
        attrs,
    )
    if terminal is not None:
        failure = _actor_failure(terminal[2])
        if failure is not None:
            event, span.status = _failure(terminal[0], *failure)
            span.events.append(event)
    return span


def _job_span(
    entity: _Entity, terminal: tuple[int, int, Any] | None, transitions: list[tuple[int, int, Any]]
) -> _SpanWire:
    _, session, job_id, _ = entity.key
    d = entity.definition
    attrs: dict[str, Any] = {semconv.RAY_JOB_ID: job_id.hex()}
    entrypoint = ""
    if d is not None:
        entrypoint = d.entrypoint
        attrs["ray.entrypoint"] = d.entrypoint
        if d.driver_pid:
            attrs[semconv.RAY_PID] = str(d.driver_pid)
        if d.driver_node_id:
            attrs[semconv.RAY_NODE_ID] = d.driver_node_id.hex()
    return _base_span(
        entity,
        terminal,
        transitions,
        trace_id_for_job(session, job_id),
        job_span_id(session, job_id),
        b"",
        f"job {entrypoint or job_id.hex()}",
        _job_state_name,
        attrs,
    )


def _other_span(entity: _Entity) -> tuple[_SpanWire, bool]:
    """An actor's or a job's span from its pieces, and whether it reached a terminal state."""
    RayEventsToOtel._materialize(entity)
    transitions = RayEventsToOtel._transitions(entity)
    terminal = RayEventsToOtel._terminal_state(transitions, entity.kind)
    build = _actor_span if entity.kind == ACTOR else _job_span
    return build(entity, terminal, transitions), terminal is not None


def _base_span(
    entity: _Entity,
    terminal: tuple[int, int, Any] | None,
    transitions: list[tuple[int, int, Any]],
    trace_id: bytes,
    span_id: bytes,
    parent_span_id: bytes,
    name: str,
    state_name: Callable[[int], str],
    attributes: dict[str, Any],
) -> _SpanWire:
    start = transitions[0][0] if transitions else entity.first_ns
    if terminal is not None:
        end = terminal[0]
    else:
        end = max(transitions[-1][0], start) if transitions else start
        attributes[semconv.INCOMPLETE_ATTR] = True
    if transitions:
        last = terminal if terminal is not None else transitions[-1]
        attributes[semconv.RAY_STATE] = state_name(last[1])
    attributes[semconv.PRODUCER_ATTR] = PRODUCER
    events = []
    for ns, state, _ in transitions:
        if terminal is not None and state == terminal[1] and ns > terminal[0]:
            continue  # a terminal state reported again later (Ray re-sends DEAD at job end)
        parts = _state_events.get((state_name, state))
        if parts is None:
            parts = _state_event_parts(state_name, state)
        events.append(parts[0] + _pack_fixed64(ns) + parts[1])
    # Written as wire bytes: building a Span message costs a Python-to-upb call per field.
    return _SpanWire(
        _span_head(trace_id, span_id, parent_span_id, name, start, end),
        otlp_wire.attributes(attributes, otlp_wire.SPAN_ATTRIBUTES),
        events,
    )


def _task_failure(at_ns: int, error_message: str, error_type: str) -> tuple[bytes, bytes]:
    """`_failure` of a failed task attempt: its exception from the error message Ray sent."""
    exc_type, message = _exception_summary(error_message, error_type)
    return _failure(at_ns, exc_type, message, _ANSI.sub("", error_message))


def _failure(at_ns: int, exc_type: str, message: str, stacktrace: str) -> tuple[bytes, bytes]:
    """(the `exception` span event, the ERROR status) of a failed span."""
    summary = f"{exc_type}: {message}" if message else exc_type
    attrs = {"exception.type": exc_type, "exception.message": message}
    if stacktrace:
        attrs["exception.stacktrace"] = stacktrace
    event = otlp_wire.span_event(at_ns, otlp_wire.span_event_fields("exception", attrs))
    return event, _error_status(summary)


def _where_ran(attrs: dict[str, Any], node_id: bytes, worker_id: bytes, pid: int) -> None:
    """The node, worker and process an entity ran in, those known, as Ray's tracing names them."""
    if node_id:
        attrs[semconv.RAY_NODE_ID] = node_id.hex()
    if worker_id:
        attrs[semconv.RAY_WORKER_ID] = worker_id.hex()
    if pid:
        attrs[semconv.RAY_PID] = str(pid)


# -- what a task's span reads of its pieces ------------------------------------------------------


class _TaskParts(NamedTuple):
    task_type: int
    name: str  # the task's name or the actor task's
    function: str  # `_function_name` of its function descriptor
    job_id: bytes
    parent_task_id: bytes
    placement_group_id: bytes
    actor_id: bytes  # an actor task's actor
    node_id: bytes
    worker_id: bytes
    worker_pid: int
    lifecycle_job_id: bytes
    error_type: int | None  # None: no RayErrorInfo arrived
    error_message: str


_read_task_parts = _entity_spans.task_parts if _compiled else None


def _task_parts(entity: _Entity) -> _TaskParts:
    """Read from the kept wire bytes in C where built, else through upb (the same values)."""
    actor_task = entity.definition_cls is ActorTaskDefinitionEvent
    if _read_task_parts is not None:
        read = _read_task_parts(entity.definition_wire, actor_task, entity.lifecycle_wire)
        if read is not None:
            return read  # type: ignore[no-any-return]
    return _task_parts_python(entity.definition_wire, actor_task, entity.lifecycle_wire)


def _task_parts_python(definition_wire: bytes | None, actor_task: bool, lifecycle_wire: bytes) -> _TaskParts:
    """A task's kept definition (an ActorTaskDefinitionEvent's when `actor_task`) and lifecycle
    pieces read through upb."""
    cls = ActorTaskDefinitionEvent if actor_task else TaskDefinitionEvent
    d = cls.FromString(definition_wire) if definition_wire is not None else None
    lc = TaskLifecycleEvent.FromString(lifecycle_wire)
    task_type, name, function, actor_id = 0, "", "", b""
    if isinstance(d, TaskDefinitionEvent):
        task_type, name, function = d.task_type, d.task_name, _function_name(d.task_func)
    elif d is not None:
        name, function, actor_id = d.actor_task_name, _function_name(d.actor_func), d.actor_id
    error = lc.ray_error_info if lc.HasField("ray_error_info") else None
    return _TaskParts(
        task_type,
        name,
        function,
        d.job_id if d is not None else b"",
        d.parent_task_id if d is not None else b"",
        d.placement_group_id if d is not None else b"",
        actor_id,
        lc.node_id,
        lc.worker_id,
        lc.worker_pid,
        lc.job_id,
        error.error_type if error is not None else None,
        error.error_message if error is not None else "",
    )


# -- spans on the wire (opentelemetry.proto.trace.v1.Span, fields in number order as upb writes them)

_pack_fixed64 = struct.Struct("<Q").pack


@dataclass(slots=True)
class _SpanWire:
    """A span being written: its fields up to the end time, its attributes, then its events (11),
    links (13) and status (15), each already encoded."""

    head: bytes
    attributes: bytes
    events: list[bytes]
    links: list[bytes] = field(default_factory=list)
    status: bytes = b""

    def wire(self) -> bytes:
        return b"".join([self.head, self.attributes, *self.events, *self.links, self.status])


def _span_head(
    trace_id: bytes, span_id: bytes, parent_span_id: bytes, name: str, start: int, end: int
) -> bytes:
    """Span fields 1-8: ids, parent, name, kind INTERNAL, start and end (zero ones left out)."""
    varint = otlp_wire.varint  # one concatenation, not a helper call a field: one per span
    head = b"\x0a" + varint(len(trace_id)) + trace_id + b"\x12" + varint(len(span_id)) + span_id
    if parent_span_id:
        head += b"\x22" + varint(len(parent_span_id)) + parent_span_id
    if name:
        data = name.encode()
        head += b"\x2a" + varint(len(data)) + data
    head += _KIND_INTERNAL_FIELD
    if start:
        head += b"\x39" + _pack_fixed64(start)
    if end:
        head += b"\x41" + _pack_fixed64(end)
    return head


_KIND_INTERNAL_FIELD = b"\x30" + bytes((_SPAN_KIND_INTERNAL,))


def _link(trace_id: bytes, span_id: bytes) -> bytes:
    """One Span.links entry (13): Link{trace_id = 1, span_id = 2}."""
    return otlp_wire.bytes_field(
        b"\x6a", otlp_wire.bytes_field(b"\x0a", trace_id) + otlp_wire.bytes_field(b"\x12", span_id)
    )


def _error_status(message: str) -> bytes:
    """Span.status (15): Status{message = 2, code = 3 ERROR}."""
    status = (otlp_wire.string_field(b"\x12", message) if message else b"") + bytes((0x18, _STATUS_ERROR))
    return otlp_wire.bytes_field(b"\x7a", status)


# (state_name, state) -> what a state's Span.events entry holds around its time: the bytes before
# it and after it (its length never changes: the time is a fixed64).
_state_events: dict[tuple[Callable[[int], str], int], tuple[bytes, bytes]] = {}


def _state_event_parts(state_name: Callable[[int], str], state: int) -> tuple[bytes, bytes]:
    """A Span.events entry (11), Event{time_unix_nano, name=state, attributes={ray.state: state}},
    as the bytes before the time and after it (`otlp_wire.span_event` with the time between)."""
    name = state_name(state)
    fields = otlp_wire.span_event_fields(name, {semconv.RAY_STATE: name})
    parts = b"\x5a" + otlp_wire.varint(9 + len(fields)) + b"\x09", fields
    if len(_state_events) < 1024:  # the states of a few enums (and a few unknown numbers)
        _state_events[(state_name, state)] = parts
    return parts


_enum_names: dict[Any, dict[int, str]] = {}


def _enum_names_of(enum: Any) -> dict[int, str]:
    """{number: its first name} of a protobuf enum."""
    names = _enum_names.get(enum)
    if names is None:
        names = _enum_names[enum] = {number: name for name, number in reversed(enum.items())}
    return names


def _enum_name(enum: Any, value: int) -> str:
    name = _enum_names_of(enum).get(value)
    return name if name is not None else str(value)


def _task_state_name(state: int) -> str:
    return _enum_name(common_pb2.TaskStatus, state)


def _actor_state_name(state: int) -> str:
    return _enum_name(ActorState, state)


def _job_state_name(state: int) -> str:
    return _enum_name(JobState, state)


def _function_name(descriptor: common_pb2.FunctionDescriptor) -> str:
    kind = descriptor.WhichOneof("function_descriptor")
    if kind == "python_function_descriptor":
        f = descriptor.python_function_descriptor
        return ".".join(part for part in (f.module_name, f.class_name, f.function_name) if part)
    if kind == "java_function_descriptor":
        j = descriptor.java_function_descriptor
        return ".".join(part for part in (j.class_name, j.function_name) if part)
    if kind == "cpp_function_descriptor":
        return descriptor.cpp_function_descriptor.function_name
    return ""


def _exception_summary(error_message: str, error_type: str) -> tuple[str, str]:
    """(exception type, message): the last `Type: message` line of a Python traceback if any."""
    lines = [line.strip() for line in _ANSI.sub("", error_message).splitlines() if line.strip()]
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line)
        if match and " " not in match.group(1):
            return match.group(1), match.group(2)
    return error_type, lines[0] if lines else ""


def _actor_failure(transition: Any) -> tuple[str, str, str] | None:
    """(exception type, message, stacktrace) when a DEAD transition is not a normal ending."""
    if not transition.HasField("death_cause"):
        return None
    cause = transition.death_cause
    context = cause.WhichOneof("context")
    if context == "creation_task_failure_context":
        text = _ANSI.sub("", cause.creation_task_failure_context.formatted_exception_string)
        exc_type, message = _exception_summary(text, "ActorCreationFailed")
        return exc_type, message or "the actor's constructor raised", text
    if context == "actor_died_error_context":
        died = cause.actor_died_error_context
        if died.reason in _NORMAL_ACTOR_DEATHS:
            return None
        reason = _enum_name(common_pb2.ActorDiedErrorContext.Reason, died.reason)
        return f"ActorDied.{reason}", died.error_message, ""
    if context == "runtime_env_failed_context":
        return "RuntimeEnvSetupFailed", cause.runtime_env_failed_context.error_message, ""
    if context == "actor_unschedulable_context":
        return "ActorUnschedulable", cause.actor_unschedulable_context.error_message, ""
    if context == "oom_context":
        return "OutOfMemory", cause.oom_context.error_message, ""
    return None


# -- the compiled core ----------------------------------------------------------------------------

# The task span's attribute names, in the order _entity_spans.c numbers them.
_TASK_SPAN_KEYS = (
    semconv.RAY_TASK_ID,
    semconv.RAY_TASK_ATTEMPT,
    semconv.RAY_JOB_ID,
    semconv.RAY_FUNCTION,
    "ray.task_type",
    semconv.RAY_REMOTE,
    semconv.RAY_ACTOR_ID,
    semconv.RAY_ACTOR_CLASS,
    semconv.RAY_ACTOR_METHOD,
    semconv.RAY_TASK_NAME,
    semconv.RAY_PARENT_TASK_ID,
    semconv.RAY_PLACEMENT_GROUP_ID,
    semconv.RAY_NODE_ID,
    semconv.RAY_WORKER_ID,
    semconv.RAY_PID,
    "ray.error_type",
    semconv.INCOMPLETE_ATTR,
    semconv.RAY_STATE,
    semconv.PRODUCER_ATTR,
)


def _core_transitions(kind: str, wire: bytes) -> list[tuple[int, int, Any]]:
    """`_transitions` of an entity's lifecycle pieces (where the core leaves them to upb)."""
    return RayEventsToOtel._transitions(
        _Entity((kind, "", b"", 0), _LIFECYCLE_TYPES[kind], 0, 0.0, lifecycle_wire=wire)
    )


def _core_other_span(
    kind: str,
    session: str,
    ident: bytes,
    first_ns: int,
    definition_wire: bytes | None,
    definition_type: int | None,
    lifecycle_wire: bytes,
) -> tuple[bytes, bool]:
    """`_other_span` of an actor or a job the core holds: (its Span's wire bytes, complete)."""
    entity = _Entity(
        (kind, session, ident, 0),
        _LIFECYCLE_TYPES[kind],
        first_ns,
        0.0,
        definition_wire,
        _DEFINITION_CLASSES.get(definition_type) if definition_type is not None else None,
        lifecycle_wire,
    )
    span, complete = _other_span(entity)
    return span.wire(), complete


@dataclass(frozen=True, slots=True)
class _CoreBinding:
    """What the compiled core reads and calls, read by attribute name at bind (_entity_spans.c's
    BINDING_NAMES). The per-kind tuples are in the order of `kinds`' first three."""

    kinds: tuple[str, str, str, str]
    entity_overhead: int
    lifecycle_types: tuple[int, int, int]
    terminal_states: tuple[tuple[int, ...], ...]
    running_states: tuple[int, ...]
    definition_keepers: dict[int, Callable[[bytes], bytes] | None]
    task_definition_type: int
    driver_task: int
    actor_creation_task: int
    failed_state: int
    span_keys: tuple[str, ...]
    producer: str
    task_type_names: dict[int, str]
    state_names: dict[int, str]
    error_type_names: dict[int, str]
    state_event: Callable[[int], tuple[bytes, bytes]]
    transitions_of: Callable[[str, bytes], list[tuple[int, int, Any]]]
    states_of: Callable[[str, bytes], list[int]]
    task_parts_of: Callable[[bytes | None, bool, bytes], _TaskParts]
    task_failure: Callable[[int, str, str], tuple[bytes, bytes]]
    other_span: Callable[..., tuple[bytes, bool]]
    record_fields: Callable[..., Any]
    parts_log_record: Callable[..., Any]
    span_type: type
    log_type: type
    task_parts_type: type
    ray_fields: dict[str, int]  # full name -> number, of each field the core reads (RAY_FIELDS)


if _compiled:
    if len(set(_TASK_SPAN_KEYS)) != len(_TASK_SPAN_KEYS):  # the core writes each once, in order
        raise RuntimeError("the task span's attribute names must differ")
    _CORE_BINDING = _CoreBinding(
        kinds=(TASK, ACTOR, JOB, PROFILE),
        entity_overhead=ENTITY_OVERHEAD_BYTES,
        lifecycle_types=(
            int(_LIFECYCLE_TYPES[TASK]),
            int(_LIFECYCLE_TYPES[ACTOR]),
            int(_LIFECYCLE_TYPES[JOB]),
        ),
        terminal_states=tuple(
            tuple(int(state) for state in _TERMINAL_STATES[kind]) for kind in (TASK, ACTOR, JOB)
        ),
        running_states=tuple(int(state) for state in _TASK_RUNNING),
        definition_keepers={int(event_type): keep for event_type, keep in _DEFINITION_KEEPERS.items()},
        task_definition_type=int(RayEvent.TASK_DEFINITION_EVENT),
        driver_task=_DRIVER_TASK,
        actor_creation_task=_ACTOR_CREATION_TASK,
        failed_state=_FAILED,
        span_keys=_TASK_SPAN_KEYS,
        producer=PRODUCER,
        task_type_names=_enum_names_of(TaskType),
        state_names=_enum_names_of(common_pb2.TaskStatus),
        error_type_names=_enum_names_of(common_pb2.ErrorType),
        state_event=functools.partial(_state_event_parts, _task_state_name),
        transitions_of=_core_transitions,
        states_of=_piece_states,
        task_parts_of=_task_parts_python,
        task_failure=_task_failure,
        other_span=_core_other_span,
        record_fields=record_fields,
        parts_log_record=parts_log_record,
        span_type=EmittedSpan,
        log_type=EmittedLog,
        task_parts_type=_TaskParts,
        ray_fields=field_numbers(_entity_spans.RAY_FIELDS),
    )
    _entity_spans.bind(_CORE_BINDING)
