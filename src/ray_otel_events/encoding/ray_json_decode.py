"""RayEvent JSON (what Ray's aggregator posts) -> RayEvent, faster than json_format.

`json_format.ParseDict` spends most of its time on per-field checks and `strptime` for every
timestamp; a RayEvent from a Ray cluster has up to a dozen timestamps. This decoder walks the
message descriptors with precomputed field tables and handles the shapes Ray actually sends (names
in either casing, enum names, int64 as strings or numbers, base64 bytes, RFC 3339 UTC timestamps,
string-keyed maps). Anything else (an unknown or repeated key, null, a special float, a time zone
offset, non-canonical base64, a value out of range...) makes it hand the whole event to
`json_format.ParseDict` with the same options, so results and errors are json_format's by
construction: the fast path only ever returns what ParseDict would have returned.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any, get_args

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from ray_otel_events import native
from ray_otel_events.encoding.proto_scalars import INT_RANGES
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

__all__ = ["decode_event", "read_event"]


class _Fallback(Exception):
    """The fast path does not handle this input; json_format decides."""


_FLOAT32_MAX = 3.4028234663852886e38
_INT_TEXT = re.compile(r"-?[0-9]+")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?Z"
)
_FRACTION = re.compile(r"(?:\.([0-9]{1,9}))?Z")  # what follows the seconds of a _TIMESTAMP
_EPOCH = datetime.datetime(1970, 1, 1)
_ONE_SECOND = datetime.timedelta(seconds=1)

Setter = Callable[[Any, Any], None]


def _int_reader(low: int, high: int) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        kind = type(value)
        if kind is int:
            number: int = value
        elif kind is str and _INT_TEXT.fullmatch(value):
            number = int(value)
        else:
            raise _Fallback
        if not low <= number <= high:
            raise _Fallback
        return number

    return read


def _read_string(value: Any) -> str:
    if type(value) is not str or (not value.isascii() and _SURROGATE.search(value)):
        raise _Fallback
    return value


def _read_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Fallback
    return value


# Ids (node, job, worker, task, parent) and timestamps' seconds repeat from event to event: each is
# read once and kept, in bounded caches (cleared when full; the GIL keeps a dict operation whole).
_CACHE_MAX = 8192
_bytes_of: dict[str, bytes] = {}
_seconds_of: dict[str, int] = {}


def _read_bytes(value: Any) -> bytes:
    if type(value) is str:
        known = _bytes_of.get(value)
        if known is not None:
            return known
    if type(value) is not str or not _BASE64.fullmatch(value):
        raise _Fallback
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Fallback from None
    if len(_bytes_of) >= _CACHE_MAX:
        _bytes_of.clear()
    _bytes_of[value] = data
    return data


def _float_reader(is_float32: bool) -> Callable[[Any], float]:
    def read(value: Any) -> float:
        kind = type(value)
        if kind is not float and kind is not int:
            raise _Fallback
        number = float(value)
        if is_float32 and abs(number) > _FLOAT32_MAX:
            raise _Fallback
        return number

    return read


def _enum_reader(field: Any) -> Callable[[Any], int]:
    by_name: dict[str, int] = {v.name: v.number for v in field.enum_type.values}
    numbers = frozenset(by_name.values())

    def read(value: Any) -> int:
        kind = type(value)
        if kind is str:
            number = by_name.get(value)
            if number is not None:
                return number
        elif kind is int and value in numbers:
            return int(value)
        raise _Fallback

    return read


def _scalar_reader(field: Any) -> Callable[[Any], Any]:
    kind = field.type
    if kind in INT_RANGES:
        return _int_reader(*INT_RANGES[kind])
    if kind == FieldDescriptor.TYPE_STRING:
        return _read_string
    if kind == FieldDescriptor.TYPE_BYTES:
        return _read_bytes
    if kind == FieldDescriptor.TYPE_BOOL:
        return _read_bool
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _float_reader(kind == FieldDescriptor.TYPE_FLOAT)
    if kind == FieldDescriptor.TYPE_ENUM:
        return _enum_reader(field)
    raise _Fallback


def _fill_timestamp(target: Any, value: Any) -> None:
    if type(value) is not str:
        raise _Fallback
    seconds = _seconds_of.get(value[:19])
    if seconds is not None and _FRACTION.fullmatch(value, 19):
        fraction = value[20:-1]
    else:
        match = _TIMESTAMP.fullmatch(value)
        if match is None:
            raise _Fallback
        year, month, day, hour, minute, second, fraction = match.groups()
        try:
            moment = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
        except ValueError:
            raise _Fallback from None
        seconds = (moment - _EPOCH) // _ONE_SECOND
        if len(_seconds_of) >= _CACHE_MAX:
            _seconds_of.clear()
        _seconds_of[value[:19]] = seconds
    target.seconds = seconds
    target.nanos = int(fraction.ljust(9, "0")) if fraction else 0


class _Table:
    """How to read each JSON key of one message type."""

    def __init__(self, descriptor: Any) -> None:
        self.setters: dict[str, tuple[int, Setter]] = {}
        self.by_json_name: dict[str, Setter] = {}
        self.oneof_of: dict[int, int] = {}
        for field in descriptor.fields:
            setter = self._setter(field)
            self.setters[field.json_name] = (field.number, setter)
            self.setters[field.name] = (field.number, setter)
            self.by_json_name[field.json_name] = setter
            oneof = field.containing_oneof
            if oneof is not None and len(oneof.fields) > 1:  # proto3 `optional` is a oneof of one
                self.oneof_of[field.number] = id(oneof)

    @staticmethod
    def _setter(field: Any) -> Setter:
        name = field.name
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            key_field = message_type.fields_by_name["key"]
            value_field = message_type.fields_by_name["value"]
            if key_field.type != FieldDescriptor.TYPE_STRING:
                return _always_fallback
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:

                def set_message_map(message: Any, value: Any) -> None:
                    if type(value) is not dict:
                        raise _Fallback
                    target = getattr(message, name)
                    for key, item in value.items():
                        _fill(target[key], item)

                return set_message_map
            read_value = _scalar_reader(value_field)

            def set_map(message: Any, value: Any) -> None:
                if type(value) is not dict:
                    raise _Fallback
                target = getattr(message, name)
                for key, item in value.items():
                    target[key] = read_value(item)

            return set_map
        if field.is_repeated:
            if message_type is not None:
                fill_item = (
                    _fill_timestamp if message_type.full_name == "google.protobuf.Timestamp" else _fill
                )

                def set_messages(message: Any, value: Any) -> None:
                    if type(value) is not list:
                        raise _Fallback
                    container = getattr(message, name)
                    for item in value:
                        fill_item(container.add(), item)

                return set_messages
            read_item = _scalar_reader(field)

            def set_scalars(message: Any, value: Any) -> None:
                if type(value) is not list:
                    raise _Fallback
                getattr(message, name).extend([read_item(item) for item in value])

            return set_scalars
        if message_type is not None:
            if message_type.full_name == "google.protobuf.Timestamp":
                return lambda message, value: _fill_timestamp(getattr(message, name), value)
            if message_type.full_name.startswith("google.protobuf."):
                return _always_fallback

            def set_message(message: Any, value: Any) -> None:
                child = getattr(message, name)
                _fill(child, value)
                child.SetInParent()

            return set_message
        if field.type == FieldDescriptor.TYPE_STRING:  # the commonest fields: read in line

            def set_string(message: Any, value: Any) -> None:
                if type(value) is not str or (not value.isascii() and _SURROGATE.search(value)):
                    raise _Fallback
                setattr(message, name, value)

            return set_string
        if field.type == FieldDescriptor.TYPE_BYTES:

            def set_bytes(message: Any, value: Any) -> None:
                known = _bytes_of.get(value) if type(value) is str else None
                setattr(message, name, known if known is not None else _read_bytes(value))

            return set_bytes
        read = _scalar_reader(field)

        def set_scalar(message: Any, value: Any) -> None:
            setattr(message, name, read(value))

        return set_scalar


def _always_fallback(message: Any, value: Any) -> None:
    raise _Fallback


_tables: dict[type, _Table] = {}  # by message class: cheaper to look up than its descriptor's name


def _fill(message: Any, obj: Any) -> None:
    if type(obj) is not dict:
        raise _Fallback
    table = _tables.get(type(message))
    if table is None:
        try:
            table = _tables[type(message)] = _Table(message.DESCRIPTOR)
        except _Fallback:
            table = _tables[type(message)] = _fallback_table(message.DESCRIPTOR)
    by_json_name = table.by_json_name
    if not table.oneof_of and by_json_name.keys() >= obj.keys():
        # Every key a camelCase field name (what Ray sends): no field can come twice, no oneof clash.
        for key, value in obj.items():
            if value is None:
                raise _Fallback
            by_json_name[key](message, value)
        return
    setters = table.setters
    seen: set[int] = set()
    oneofs: set[int] = set()
    for key, value in obj.items():
        entry = setters.get(key)
        if entry is None or value is None:
            raise _Fallback  # unknown field or null: json_format's rules apply
        number, setter = entry
        if number in seen:
            raise _Fallback  # the same field under both names
        seen.add(number)
        oneof = table.oneof_of.get(number)
        if oneof is not None:
            if oneof in oneofs:
                raise _Fallback
            oneofs.add(oneof)
        setter(message, value)


def _fallback_table(descriptor: Any) -> _Table:
    """A type with a field the fast path cannot read: every key falls back."""
    table = _Table.__new__(_Table)
    table.setters = {}
    table.by_json_name = {}
    table.oneof_of = {}
    return table


# -- the same fast path, compiled (_ray_json_wire.c) -------------------------------------------------
#
# The C reader writes the event's wire bytes and `RayEvent.FromString` makes the message in one call.
# It knows each message type's fields from a schema made here from the same descriptors and by the
# same rules as `_Table`; where `_fill` would fall back, it returns None and `_fill` runs.

# Field kinds and labels, as native/wire_schema.h numbers them for the compiled readers
# (check_wire_kinds holds each to these).
K_FALLBACK, K_STRING, K_BYTES, K_BOOL, K_INT = range(5)
K_DOUBLE, K_FLOAT, K_ENUM, K_MESSAGE, K_TIMESTAMP = range(5, 10)
SINGULAR, REPEATED, MAP = range(3)
_TIMESTAMP_TYPE = "google.protobuf.Timestamp"
_SCALAR_KINDS = {
    FieldDescriptor.TYPE_STRING: K_STRING,
    FieldDescriptor.TYPE_BYTES: K_BYTES,
    FieldDescriptor.TYPE_BOOL: K_BOOL,
    FieldDescriptor.TYPE_DOUBLE: K_DOUBLE,
    FieldDescriptor.TYPE_FLOAT: K_FLOAT,
    FieldDescriptor.TYPE_ENUM: K_ENUM,
}
# The varint integer types (what the C reader writes); others are read in Python.
_VARINT_INTS = (
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
)

WireField = tuple[int, int, int, int, int, Any, Any]  # (number, kind, label, low, high, extra, oneof)
WireSchema = dict[str, WireField]
WIRE_KINDS = {
    "K_FALLBACK": K_FALLBACK,
    "K_STRING": K_STRING,
    "K_BYTES": K_BYTES,
    "K_BOOL": K_BOOL,
    "K_INT": K_INT,
    "K_DOUBLE": K_DOUBLE,
    "K_FLOAT": K_FLOAT,
    "K_ENUM": K_ENUM,
    "K_MESSAGE": K_MESSAGE,
    "K_TIMESTAMP": K_TIMESTAMP,
    "SINGULAR": SINGULAR,
    "REPEATED": REPEATED,
    "MAP": MAP,
    "F_SIZE": len(get_args(WireField)),
}


def check_wire_kinds(module: ModuleType) -> None:
    """Refuse a compiled reader whose kinds, labels or field size (native/wire_schema.h, which it
    exports) are not these: it was built from other sources, and would misread every schema."""
    native.check_numbers(module, WIRE_KINDS)


def _scalar_kind(field: Any) -> tuple[int, int, int, Any]:
    """(kind, low, high, extra) of a scalar field, as `_scalar_reader` reads it."""
    if field.type in _VARINT_INTS:
        return (K_INT, *INT_RANGES[field.type], None)
    kind = _SCALAR_KINDS.get(field.type, K_FALLBACK)
    if kind == K_ENUM:
        by_name = {v.name: v.number for v in field.enum_type.values}
        return kind, 0, 0, (by_name, frozenset(by_name.values()))
    return kind, 0, 0, None


def wire_schema(descriptor: Any, schemas: dict[str, WireSchema]) -> WireSchema:
    """JSON and proto names -> field, for `_ray_json_wire.event_wire`; empty (every key falls back)
    for a type `_Table` cannot read."""
    schema = schemas.get(descriptor.full_name)
    if schema is not None:
        return schema
    schema = schemas[descriptor.full_name] = {}
    try:
        _Table(descriptor)
    except _Fallback:
        return schema
    oneof_names: dict[str, str] = {}  # one object per oneof: the C reader compares them by identity
    for field in descriptor.fields:
        oneof = field.containing_oneof
        oneof_name = (
            oneof_names.setdefault(oneof.full_name, oneof.full_name)
            if oneof is not None and len(oneof.fields) > 1
            else None
        )
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            key, value = message.fields_by_name["key"], message.fields_by_name["value"]
            if key.type != FieldDescriptor.TYPE_STRING:
                kind, low, high, extra = K_FALLBACK, 0, 0, None
            elif value.message_type is not None:  # `_fill` of each value, Timestamps included
                kind, low, high, extra = K_MESSAGE, 0, 0, wire_schema(value.message_type, schemas)
            else:
                kind, low, high, extra = _scalar_kind(value)
            label = MAP
        elif message is not None:
            label = REPEATED if field.is_repeated else SINGULAR
            if message.full_name == _TIMESTAMP_TYPE:
                kind, low, high, extra = K_TIMESTAMP, 0, 0, None
            elif label == SINGULAR and message.full_name.startswith("google.protobuf."):
                kind, low, high, extra = K_FALLBACK, 0, 0, None
            else:
                kind, low, high, extra = K_MESSAGE, 0, 0, wire_schema(message, schemas)
        else:
            label = REPEATED if field.is_repeated else SINGULAR
            kind, low, high, extra = _scalar_kind(field)
        entry = (field.number, kind, label, low, high, extra, oneof_name)
        schema[field.json_name] = schema[field.name] = entry
    return schema


try:  # built by setup.py where a C compiler is present
    from ray_otel_events.native import _ray_json_wire
except ImportError:
    _ray_json_wire = None  # type: ignore[assignment]
_EVENT_SCHEMA = wire_schema(RayEvent.DESCRIPTOR, {})
_event_wire: Callable[[Any, WireSchema], bytes | None] | None = None
if _ray_json_wire is not None and native.ENABLED:
    check_wire_kinds(_ray_json_wire)
    _event_wire = _ray_json_wire.event_wire


def reads_compiled() -> bool:
    """Whether RayEvent JSON objects are read by the compiled fast path (_ray_json_wire.c)."""
    return _event_wire is not None


def event_schema() -> WireSchema:
    """RayEvent's schema for the compiled readers (JSON and proto names -> field)."""
    return _EVENT_SCHEMA


def event_wires(items: list[Any]) -> list[bytes | None]:
    """For each item, the wire bytes `read_event` would make its event from on the compiled fast
    path (then it reads the item whole), or None where that path does not (not built, not an
    object, or an item it hands to Python): one loop for a POST's items instead of a call each."""
    if _event_wire is None:
        return [None] * len(items)
    write, schema = _event_wire, _EVENT_SCHEMA
    return [write(item, schema) if type(item) is dict else None for item in items]


def decode_event(obj: Any, ignore_unknown_fields: bool = False) -> RayEvent:
    """The RayEvent of one JSON object; json_format.ParseError if it is not one."""
    return read_event(obj, ignore_unknown_fields)[0]


def read_event(obj: Any, ignore_unknown_fields: bool = False) -> tuple[RayEvent, bool]:
    """`decode_event`, and whether the fast path read `obj` whole: then every key of it is a field
    and every value one protobuf's JSON mapping reads, so `obj` stands for the event as it is."""
    if _event_wire is not None:
        wire = _event_wire(obj, _EVENT_SCHEMA)
        if wire is not None:
            return RayEvent.FromString(wire), True
    event = RayEvent()
    try:
        _fill(event, obj)
    except (_Fallback, ValueError, TypeError, OverflowError):
        event = RayEvent()
        parse_dict(obj, event, ignore_unknown_fields)
        return event, False
    return event, True


def parse_dict(obj: Any, event: RayEvent, ignore_unknown_fields: bool = False) -> None:
    """json_format.ParseDict, whose errors on hostile values are not all ParseError: a value
    nested a thousand deep overflows its stack, a timestamp's fraction like "4E999" its floats."""
    try:
        json_format.ParseDict(obj, event, ignore_unknown_fields=ignore_unknown_fields)
    except RecursionError:
        raise json_format.ParseError("a value is nested too deep") from None
    except OverflowError as exc:
        raise json_format.ParseError(f"a number is out of range: {exc}") from None
