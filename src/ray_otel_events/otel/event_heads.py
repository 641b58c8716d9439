"""What the bridge reads of every RayEvent before anything else, once: its envelope, the entity
whose span it is part of, its payload's wire bytes, and its entity attributes (the ids in the hex
form Ray's tracing uses) already written as LogRecord attribute entries.

Both the log record and the span assembly start from these; read through upb they cost a dozen
accessor calls and a dict per event, so they are read from the event's wire bytes in C where that is
built (native/_event_head.c). The Python reading here is the reference the compiled one is held to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.descriptor import FieldDescriptor

from ray_otel_events import native
from ray_otel_events.events import ids
from ray_otel_events.events.registry import REGISTRY, event_type_name
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.protobuf._pool import POOL, field_numbers
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]

TASK, ACTOR, JOB = "task", "actor", "job"  # the entities that become spans
PROFILE = "profile"  # a task's profile events: part of its span's trace, not an entity of their own


class EventHead(NamedTuple):
    event_id: bytes
    event_type: int
    session: str
    time_ns: int  # the event's timestamp as OTLP carries it (0: unknown)
    severity: int
    kind: str  # TASK, ACTOR, JOB, PROFILE, or "" (nodes, workers and the rest: no span)
    entity_id: bytes
    attempt: int  # a task's attempt (0 for other kinds)
    job: bytes  # the job whose trace the entity's span is in (empty when kind is "")
    payload: bytes  # the type's payload message, serialized
    attributes: bytes  # `entity_attributes`, as LogRecord.attributes entries


# Payload id fields -> Ray's tracing attribute names (hex).
_ID_ATTRIBUTES = {
    "task_id": semconv.RAY_TASK_ID,
    "job_id": semconv.RAY_JOB_ID,
    "actor_id": semconv.RAY_ACTOR_ID,
    "node_id": semconv.RAY_NODE_ID,
    "worker_id": semconv.RAY_WORKER_ID,
    "parent_task_id": semconv.RAY_PARENT_TASK_ID,
    "placement_group_id": semconv.RAY_PLACEMENT_GROUP_ID,
}


@dataclass(frozen=True)
class _TypeSpec:
    """One event type's payload: which of its fields are ids, the attempt and the submission (for
    the attributes), and which name the entity (for the span)."""

    payload: str
    ids: tuple[tuple[str, str], ...]
    attempt: str | None
    submission_id: bool
    kind: str = ""
    entity_id: str | None = None
    entity_attempt: str | None = None
    entity_job: str | None = None  # the payload's job id, used where the id does not hold the job


_ENTITIES: dict[int, tuple[str, str, str | None, str | None]] = {  # type -> kind, id, attempt, job
    RayEvent.TASK_DEFINITION_EVENT: (TASK, "task_id", "task_attempt", "job_id"),
    RayEvent.ACTOR_TASK_DEFINITION_EVENT: (TASK, "task_id", "task_attempt", "job_id"),
    RayEvent.TASK_LIFECYCLE_EVENT: (TASK, "task_id", "task_attempt", "job_id"),
    RayEvent.TASK_PROFILE_EVENT: (PROFILE, "task_id", "attempt_number", "job_id"),
    RayEvent.ACTOR_DEFINITION_EVENT: (ACTOR, "actor_id", None, "job_id"),
    RayEvent.ACTOR_LIFECYCLE_EVENT: (ACTOR, "actor_id", None, None),
    RayEvent.DRIVER_JOB_DEFINITION_EVENT: (JOB, "job_id", None, None),
    RayEvent.DRIVER_JOB_LIFECYCLE_EVENT: (JOB, "job_id", None, None),
}
# Where an id holds its job (the last 4 bytes) when it has this length.
_JOB_IN_ID = {TASK: ids.TASK_ID_SIZE, PROFILE: ids.TASK_ID_SIZE, ACTOR: ids.ACTOR_ID_SIZE}


def job_of(kind: str, ident: bytes, fallback: bytes) -> bytes:
    """The job whose trace an entity's span is in: a driver job's own id; the last bytes of a task's
    or an actor's id (they end with their job's) when it has its full length; else `fallback`, the
    job its pieces name."""
    if kind == JOB:
        return ident
    return ident[-ids.JOB_ID_SIZE :] if len(ident) == _JOB_IN_ID[kind] else fallback


def _payload_descriptor(spec_payload: str) -> Any:
    return RayEvent.DESCRIPTOR.fields_by_name[spec_payload].message_type


def _type_spec(event_type: int) -> _TypeSpec | None:
    spec = REGISTRY.get(event_type)
    if spec is None:
        return None
    names = _payload_descriptor(spec.payload_field).fields_by_name
    kind, entity_id, entity_attempt, entity_job = _ENTITIES.get(event_type, ("", None, None, None))
    return _TypeSpec(
        payload=spec.payload_field,
        ids=tuple(
            (f, a)
            for f, a in _ID_ATTRIBUTES.items()
            if f in names and names[f].type == FieldDescriptor.TYPE_BYTES
        ),
        attempt=next((f for f in ("attempt_number", "task_attempt") if f in names), None),
        submission_id="submission_id" in names,
        kind=kind,
        entity_id=entity_id,
        entity_attempt=entity_attempt,
        entity_job=entity_job,
    )


_SPECS: dict[int, _TypeSpec] = {
    event_type: spec for event_type in REGISTRY if (spec := _type_spec(event_type)) is not None
}


def entity_attributes(event: RayEvent) -> dict[str, AttributeValue]:
    """Entity ids in Ray's hex attribute names, plus attempt, type and session."""
    attrs: dict[str, AttributeValue] = {
        semconv.RAY_EVENT_TYPE: event_type_name(event.event_type),
        semconv.RAY_SESSION_NAME: event.session_name,
    }
    spec = _SPECS.get(event.event_type)
    if spec is None:
        return attrs
    payload = getattr(event, spec.payload)
    for name, attr in spec.ids:
        value = getattr(payload, name)
        if value:
            attrs[attr] = value.hex()
    if spec.attempt is not None:
        attrs[semconv.RAY_TASK_ATTEMPT] = int(getattr(payload, spec.attempt))
    if spec.submission_id and payload.submission_id:
        attrs[semconv.RAY_SUBMISSION_ID] = payload.submission_id
    if event.node_id and semconv.RAY_NODE_ID not in attrs:
        attrs[semconv.RAY_NODE_ID] = event.node_id.hex()
    return attrs


def python_head(event: RayEvent) -> EventHead:
    """`read_head` through upb: the reference."""
    spec = _SPECS.get(event.event_type)
    kind, entity_id, attempt, job, payload = "", b"", 0, b"", b""
    if spec is not None:
        message = getattr(event, spec.payload)
        payload = message.SerializeToString()
        kind = spec.kind
        if spec.entity_id is not None:
            entity_id = getattr(message, spec.entity_id)
            attempt = int(getattr(message, spec.entity_attempt)) if spec.entity_attempt else 0
            job = job_of(kind, entity_id, getattr(message, spec.entity_job) if spec.entity_job else b"")
    return EventHead(
        event.event_id,
        event.event_type,
        event.session_name,
        otlp_wire.unix_nano(event.timestamp),
        event.severity,
        kind,
        entity_id,
        attempt,
        job,
        payload,
        otlp_wire.attributes(entity_attributes(event), otlp_wire.LOG_RECORD_ATTRIBUTES),
    )


try:  # the same read from wire bytes, compiled (setup.py builds it where a C compiler is present)
    from ray_otel_events.native import _event_head
except ImportError:
    _event_head = None  # type: ignore[assignment]
_compiled = _event_head is not None and native.ENABLED


_FUNCTION_DESCRIPTOR = "ray.rpc.FunctionDescriptor"


def _function_members() -> dict[int, int]:
    """FunctionDescriptor's oneof members, each number with its message's highest field number:
    what the compiled filter copies of one. It copies strings only, so any other field is an error
    here, at import, not a wrong copy."""
    members = {}
    for member in POOL.FindMessageTypeByName(_FUNCTION_DESCRIPTOR).fields:
        fields = member.message_type.fields if member.message_type else ()
        if not fields or any(f.type != FieldDescriptor.TYPE_STRING or f.is_repeated for f in fields):
            raise RuntimeError(f"{member.full_name}: the compiled filter copies string fields only")
        members[member.number] = max(f.number for f in fields)
    return members


def _bind() -> None:
    """Tells the compiled reader the schema: field numbers, kinds and encoded attribute keys."""
    _event_head.bind_fields(field_numbers(_event_head.RAY_FIELDS), _function_members())
    specs = {}
    for event_type, spec in _SPECS.items():
        names = _payload_descriptor(spec.payload).fields_by_name

        def number(name: str | None) -> int:
            return names[name].number if name else 0  # noqa: B023 (used at once)

        type_entry = otlp_wire.attributes(
            {semconv.RAY_EVENT_TYPE: event_type_name(event_type)}, otlp_wire.LOG_RECORD_ATTRIBUTES
        )
        specs[event_type] = (
            RayEvent.DESCRIPTOR.fields_by_name[spec.payload].number,
            spec.kind,
            _JOB_IN_ID.get(spec.kind, 0),
            spec.kind == JOB,
            number(spec.entity_id),
            number(spec.entity_attempt),
            number(spec.entity_job),
            number(spec.attempt),
            number("submission_id" if spec.submission_id else None),
            tuple((number(name), otlp_wire.key_field(attr)) for name, attr in spec.ids),
            type_entry,
        )
    keys = tuple(
        otlp_wire.key_field(key)
        for key in (
            semconv.RAY_SESSION_NAME,
            semconv.RAY_NODE_ID,
            semconv.RAY_TASK_ATTEMPT,
            semconv.RAY_SUBMISSION_ID,
        )
    )
    _event_head.bind(specs, keys, EventHead, _checks())


_F = FieldDescriptor
_CHECK_KINDS = {
    **dict.fromkeys(
        (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT32,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_BOOL,
            FieldDescriptor.TYPE_ENUM,
        ),
        1,
    ),
    **dict.fromkeys(
        (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64), 2
    ),
    **dict.fromkeys(
        (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32), 3
    ),
    FieldDescriptor.TYPE_STRING: 4,
    FieldDescriptor.TYPE_BYTES: 5,
    FieldDescriptor.TYPE_MESSAGE: 6,
}


def _checks() -> tuple[bytes, ...]:
    """What `checked_head` reads of wire bytes that did not come through upb: per message (RayEvent
    first, then every message it holds), per field number, its kind (`_CHECK_KINDS`; every string's
    UTF-8 is checked: where upb would not check it, upb reads the event), 8 where repeated, 16
    times its message's index."""
    order = [RayEvent.DESCRIPTOR]
    index = {RayEvent.DESCRIPTOR.full_name: 0}
    tables: list[bytes] = []
    while len(tables) < len(order):
        message = order[len(tables)]
        entries = [0] * (max((f.number for f in message.fields), default=0) + 1)
        for f in message.fields:
            kind = _CHECK_KINDS.get(f.type, 0)
            sub = 0
            if f.message_type is not None:
                if f.message_type.full_name not in index:
                    index[f.message_type.full_name] = len(order)
                    order.append(f.message_type)
                sub = index[f.message_type.full_name]
            entries[f.number] = kind | (8 if f.is_repeated else 0) | sub << 4
        tables.append(b"".join(e.to_bytes(2, "little") for e in entries))
    return tuple(tables)


if _compiled:
    _bind()
# The compiled reader (None where not built or turned off): `wire_head` without the upb fallback.
compiled_head: Callable[[bytes], EventHead | None] | None = _event_head.head if _compiled else None
# The same for wire bytes that did not come through upb: None also where upb might refuse them.
checked_head: Callable[[bytes], EventHead | None] | None = _event_head.checked_head if _compiled else None


def read_head(event: RayEvent) -> EventHead:
    """The event's head: from its wire bytes where the compiled reader is built and reads them,
    else through upb (the same values)."""
    if _compiled:
        head: EventHead | None = _event_head.head(event.SerializeToString())
        if head is not None:
            return head
    return python_head(event)


def wire_head(wire: bytes, event: RayEvent | None = None) -> EventHead:
    """`read_head` of the event whose wire bytes are `wire`; `event`: that event, when the caller
    has it parsed (the bytes are then upb's). Bytes that did not come through upb (forwarded,
    queued) are refused as upb refuses them (DecodeError)."""
    if _compiled:
        head: EventHead | None = (_event_head.head if event is not None else _event_head.checked_head)(wire)
        if head is not None:
            return head
    if event is not None:
        return python_head(event)
    head = python_head(RayEvent.FromString(wire))
    # The payload as `wire` holds it, as the compiled reader takes it: upb writes a map parsed
    # from bytes in an order of its own, so serializing the parsed payload may reorder its entries.
    spec = _SPECS.get(head.event_type)
    if spec is not None:
        payload = _field_bytes(wire, RayEvent.DESCRIPTOR.fields_by_name[spec.payload].number)
        if payload is not None:
            head = head._replace(payload=payload)
    return head


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _field_bytes(wire: bytes, number: int) -> bytes | None:
    """The contents of the length-delimited field `number` of a message's wire bytes, where it
    appears exactly once (else None: upb merges repeated occurrences)."""
    found: bytes | None = None
    at = 0
    try:
        while at < len(wire):
            tag, at = _varint(wire, at)
            kind = tag & 7
            if kind == 0:
                _, at = _varint(wire, at)
            elif kind == 1:
                at += 8
            elif kind == 5:
                at += 4
            elif kind == 2:
                size, at = _varint(wire, at)
                if tag >> 3 == number:
                    if found is not None:
                        return None
                    found = wire[at : at + size]
                at += size
            else:
                return None
    except ValueError:
        return None
    return found if at == len(wire) else None


# -- a payload kept slim ------------------------------------------------------------------------

_keep_plans: dict[tuple[Any, tuple[str, ...]], tuple[bytes, int] | None] = {}


def _keep_plan(message_class: Any, names: tuple[str, ...]) -> tuple[bytes, int] | None:
    """(the kept field numbers' wire types + 1 by number, the FunctionDescriptor's number) for the
    compiled filter; None where it does not apply (more than one FunctionDescriptor, a number past
    its mask, a field that is not an enum, a string, bytes or a message, or that is repeated or has
    explicit presence)."""
    key = (message_class, names)
    if key not in _keep_plans:
        fields = [message_class.DESCRIPTOR.fields_by_name[name] for name in names]
        functions = [
            f.number for f in fields if f.message_type and f.message_type.full_name == _FUNCTION_DESCRIPTOR
        ]
        wire_types = {
            FieldDescriptor.TYPE_ENUM: 0,
            FieldDescriptor.TYPE_STRING: 2,
            FieldDescriptor.TYPE_BYTES: 2,
            FieldDescriptor.TYPE_MESSAGE: 2,
        }
        plan = None
        if (
            len(functions) <= 1
            and all(f.number < 64 and f.type in wire_types and not f.is_repeated for f in fields)
            and all(f.message_type is not None or not f.has_presence for f in fields)
            and all(f.message_type is None or f.number in functions for f in fields)
        ):
            mask = bytearray(64)
            for f in fields:
                mask[f.number] = wire_types[f.type] + 1
            plan = (bytes(mask), functions[0] if functions else 0)
        _keep_plans[key] = plan
    return _keep_plans[key]


def kept_fields(wire: bytes, message_class: Any, names: tuple[str, ...]) -> bytes:
    """`wire` (a serialized `message_class`) with only the fields `names`, and of a
    FunctionDescriptor among them, its names (not the Python function's hash or the Java one's
    signature): what an open span keeps of a definition that can be kilobytes."""
    return field_keeper(message_class, names)(wire)


def field_keeper(message_class: Any, names: tuple[str, ...]) -> Callable[[bytes], bytes]:
    """`kept_fields` of one message class and field names, as a callable of the wire bytes: the
    compiled filter itself where built, with no Python frame around it."""
    plan = _keep_plan(message_class, names) if _compiled else None
    python = functools.partial(_kept_fields_python, message_class, names)
    if plan is not None:
        return functools.partial(_event_head.slim, *plan, python)
    return python


def _kept_fields_python(message_class: Any, names: tuple[str, ...], wire: bytes) -> bytes:
    message = message_class.FromString(wire)
    slim = message_class()
    for name in names:
        field = message_class.DESCRIPTOR.fields_by_name[name]
        if field.message_type is None:
            setattr(slim, name, getattr(message, name))
        elif message.HasField(name):
            func = getattr(slim, name)
            func.CopyFrom(getattr(message, name))
            if field.message_type.full_name != _FUNCTION_DESCRIPTOR:
                continue
            kind = func.WhichOneof("function_descriptor")
            if kind == "python_function_descriptor":
                func.python_function_descriptor.ClearField("function_hash")
            elif kind == "java_function_descriptor":
                func.java_function_descriptor.ClearField("signature")
    return bytes(slim.SerializeToString())
