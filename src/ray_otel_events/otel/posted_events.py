"""A POST of RayEvent JSON read for the converter: per event, what its log record and its span
need (`EventParts`), in one pass over the POST's text where that is compiled (native/_posted_events.c).

The Python path (`read_posted_events_python`) is the reference, and what reads any body or item
the compiled pass leaves: orjson parses the body, each object is read into a RayEvent
(`encoding.ray_json_posts.parse_posted_item`), serialized, its head read, and its record's body
later walked from the object as posted (`log_records.parts_log_record`). The compiled pass writes
the same bytes for the items it takes (every key a field's lowerCamelCase name, every value one the
Python path reads whole); any other item (proto names, unknown fields, duplicate keys, odd values)
is read by the Python path on its own, and any body that is not plain JSON to it (not JSON at all,
numbers orjson reads otherwise) is read by the Python path whole, so answers and errors stay the
Python path's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from ray_otel_events import native
from ray_otel_events.encoding import ray_json_decode
from ray_otel_events.encoding.ray_json_posts import parse_posted_events, parse_posted_item, read_posted_items
from ray_otel_events.otel.event_heads import EventHead, compiled_head, wire_head
from ray_otel_events.otel.log_records import record_entries
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent


class EventParts(NamedTuple):
    """One RayEvent as the converter takes it."""

    head: EventHead
    wire: bytes  # the event serialized (as upb writes it): what a durable bridge keeps
    body: bytes | None  # its record's body, KeyValueList entries; None: written from `source`
    attributes: bytes  # with `body`: its flattened `ray.event.*` attribute entries
    source: Mapping[str, Any] | RayEvent | None  # the posted object or the event (None: `wire`)


def event_parts(event: RayEvent, posted: Mapping[str, Any] | None = None) -> EventParts:
    """The parts of a RayEvent; `posted`: the JSON object it was read whole from, if any (its
    record's body is then written from that object as posted)."""
    wire = event.SerializeToString()
    return EventParts(wire_head(wire, event), wire, None, b"", posted if posted is not None else event)


def wire_parts(wire: bytes) -> EventParts:
    """The parts of a RayEvent's wire bytes (as upb writes them)."""
    return EventParts(wire_head(wire), wire, None, b"", None)


def read_posted_events_python(body: bytes) -> tuple[list[EventParts], list[str]]:
    """The reference: orjson and the Python reader, item by item. NotAnArrayError (400) when the
    body is not a JSON array."""
    _, posted, errors = read_posted_items(body, parse_posted_events)
    return [event_parts(p.event, p.json) for p in posted], errors


# -- the compiled pass ------------------------------------------------------------------------


def _messages() -> tuple[list[tuple[bool, tuple[Any, ...]]], int]:
    """The schema as _posted_events.bind takes it, made from ray_json_decode's (the same kinds,
    labels, bounds and enum names), with each field's proto name and presence."""
    schemas: dict[str, ray_json_decode.WireSchema] = {}
    index: dict[str, int] = {}
    messages: list[tuple[bool, tuple[Any, ...]]] = []

    def add(descriptor: Any) -> int:
        name = descriptor.full_name
        if name in index:
            return index[name]
        at = index[name] = len(messages)
        messages.append((False, ()))
        schema = ray_json_decode.wire_schema(descriptor, schemas)
        fields = []
        oneofs: dict[str, int] = {}
        for field in descriptor.fields:
            entry = schema.get(field.json_name)
            if entry is None:
                continue
            number, kind, label, low, high, extra, oneof = entry
            enums = None
            sub = -1
            if kind == ray_json_decode.K_ENUM:
                enums = tuple((name.encode(), value) for name, value in extra[0].items())
            elif kind == ray_json_decode.K_MESSAGE:
                message = field.message_type
                if label == ray_json_decode.MAP:
                    message = message.fields_by_name["value"].message_type
                sub = add(message)
            fields.append(
                (
                    field.json_name.encode(),
                    field.name.encode(),
                    number,
                    kind,
                    label,
                    low,
                    high,
                    enums,
                    sub,
                    oneofs.setdefault(oneof, len(oneofs) + 1) if oneof is not None else 0,
                    field.has_presence and field.type != FieldDescriptor.TYPE_MESSAGE,
                )
            )
        messages[at] = (bool(schema), tuple(fields))
        return at

    root = add(RayEvent.DESCRIPTOR)
    return messages, root


try:  # built by setup.py where a C compiler is present
    from ray_otel_events.native import _posted_events
except ImportError:
    _posted_events = None  # type: ignore[assignment]
_read: Callable[[bytes], tuple[list[Any], bool] | None] | None = None
_pieces: Callable[[list[EventParts], bool], bytes | None] | None = None
_read_pieces: Callable[[bytes], tuple[list[Any], bool]] | None = None
if _posted_events is not None and native.ENABLED and compiled_head is not None:
    ray_json_decode.check_wire_kinds(_posted_events)
    _posted_events.bind(
        *_messages(), RayEvent.DESCRIPTOR.fields_by_name["event_type"].number, compiled_head, EventParts
    )
    _read = _posted_events.read
    _pieces = _posted_events.pieces
    _read_pieces = _posted_events.read_pieces


def read_posted_events(body: bytes) -> tuple[list[EventParts], list[str]]:
    """A POSTed body's events and an error naming each item that is not one (as the Python path
    answers), read in one compiled pass where built. NotAnArrayError (400) when the body is not a JSON
    array."""
    read = _read(body) if _read is not None else None
    if read is None:
        return read_posted_events_python(body)
    items, whole = read
    if whole:  # every item read by the compiled pass
        return items, []
    parts: list[EventParts] = []
    errors: list[str] = []
    for index, item in enumerate(items):
        if type(item) is EventParts:
            if item.head is None:  # a map of several entries (upb orders them), or a type without a head
                event = RayEvent.FromString(item.wire)
                wire = event.SerializeToString()
                item = item._replace(head=wire_head(wire, event), wire=wire)
            parts.append(item)
            continue
        try:
            posted = parse_posted_item(orjson.loads(memoryview(body)[item]))
        except ValueError as exc:
            errors.append(f"[{index}]: {exc}")
            continue
        parts.append(event_parts(posted.event, posted.json))
    return parts, errors


# -- events forwarded to the worker that owns them --------------------------------------------------


_NO_BODY = b"\xff\xff\xff\xff"  # the length of a body not sent


def encode_pieces(events: list[EventParts], records: bool = True) -> bytes:
    """Events for the bridge worker that owns them (services/bridge_workers.py): per event its wire
    bytes, its record's body entries and its attribute entries, each after a 4-byte big-endian
    length, so that the owner writes the record without walking the event again. `records=False`
    (the owner writes no records): no body (its length 0xFFFFFFFF) and no attributes."""
    if _pieces is not None:
        data = _pieces(events, records)  # None: a record not read yet, walked below
        if data is not None:
            return data
    out: list[bytes] = []
    for parts in events:
        out += (len(parts.wire).to_bytes(4, "big"), parts.wire)
        if not records:
            out += (_NO_BODY, b"\x00\x00\x00\x00")
            continue
        body, attributes = parts.body, parts.attributes
        if body is None:
            body, attributes = record_entries(parts.source if parts.source is not None else parts.wire)
        for field in (body, attributes):
            out += (len(field).to_bytes(4, "big"), field)
    return b"".join(out)


def decode_pieces(data: bytes) -> list[EventParts]:
    """The events `encode_pieces` wrote; ValueError when the data is cut short or an event's wire
    bytes are not a RayEvent (upb's DecodeError, which is not a ValueError)."""
    try:
        return _decode_pieces(data)
    except DecodeError as exc:
        raise ValueError(f"a piece is not a RayEvent: {exc}") from None


def _decode_pieces(data: bytes) -> list[EventParts]:
    if _read_pieces is not None:
        items, whole = _read_pieces(data)
        if whole:
            return items
        return [p if p.head is not None else p._replace(head=wire_head(p.wire)) for p in items]
    fields: list[bytes | None] = []
    at, end = 0, len(data)
    while at < end:
        size = int.from_bytes(data[at : at + 4], "big")
        if at + 4 > end:
            raise ValueError("a truncated piece")
        if size == 0xFFFFFFFF and len(fields) % 3 == 1:
            fields.append(None)
            at += 4
            continue
        if at + 4 + size > end:
            raise ValueError("a truncated piece")
        fields.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    if len(fields) % 3:
        raise ValueError("a truncated piece")
    return [
        EventParts(wire_head(wire), wire, body, attributes, None)  # type: ignore[arg-type]
        for wire, body, attributes in zip(fields[0::3], fields[1::3], fields[2::3], strict=True)
    ]
