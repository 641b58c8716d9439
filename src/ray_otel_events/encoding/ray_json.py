"""RayEvent -> the JSON Ray's aggregator posts, without json_format's per-field reflection.

Ray converts every event with ``json.loads(MessageToJson(e, always_print_fields_with_no_presence=True,
preserving_proto_field_name=P))`` and ``json.dumps`` the list; that is the aggregator's main CPU
cost. We produce the same JSON value with the same key order much faster (bench/RESULTS.md): for
each message descriptor (and naming flag) we generate, once, a Python function specialised to its
fields and cache it. The proto files stay the only schema: a new field or message
needs no change here.

Where it is built (setup.py), `_ray_json_encode.c` writes the JSON of wire-format events straight
from their bytes, following a schema made from the same descriptors (`_encode_schema`): the same
bytes as the generated functions' dicts through orjson, faster still; an event holding anything it
does not reproduce exactly (a map of more than one entry, a float field...) goes through the
generated function.

The key order is json_format's: first the fields ``ListFields()`` returns (the set ones, by field
number), then the unset fields without presence (implicit scalars, repeated, maps) in declaration
order with their default values; unset message fields, unset ``optional`` fields and unset oneof
members are omitted. Maps keep the iteration order of the map container, as json_format does.

Failures never pass silently: ``encode``/``encode_serialized`` raise :class:`EventEncodeError` naming
the event's index; ``try_encode``/``try_encode_serialized`` encode every good event and return the
bad ones' indices and reasons, so a publisher can post the rest and count those as dropped.
"""

from __future__ import annotations

import binascii
import datetime
import functools
import keyword
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal import type_checkers
from google.protobuf.message import DecodeError, Message

from ray_otel_events import native
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

try:  # built by setup.py where a C compiler is present
    from ray_otel_events.native import _ray_json_encode
except ImportError:
    _ray_json_encode = None  # type: ignore[assignment]

__all__ = [
    "TIMESTAMP_SECONDS_MAX",
    "EncodeFailure",
    "EncodeResult",
    "EventEncodeError",
    "RayEventJsonEncoder",
    "TimestampRangeError",
    "base64_text",
    "timestamp_text",
]

# Descriptors come from upb or from the pure-Python runtime; their stubs disagree, so the
# compiler handles them as duck-typed objects.
DescriptorLike = Any
MessageEncoder = Callable[[Any], dict[str, Any]]


class TimestampRangeError(json_format.SerializeToJsonError, ValueError):
    """A Timestamp RFC 3339 cannot express, which json_format refuses to print too.

    Both a ``ValueError`` (what ``Timestamp.ToJsonString`` raises) and a ``SerializeToJsonError``
    (what ``MessageToJson`` raises for a nested one), so code written against either still works.
    """


class EventEncodeError(ValueError):
    """One event of a batch could not be encoded; ``index`` is its position in the batch."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"event {index}: {reason}")
        self.index = index
        self.reason = reason


@dataclass(frozen=True, slots=True)
class EncodeFailure:
    """An event left out of an :class:`EncodeResult`, and why."""

    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class EncodeResult:
    """A JSON array of the events that could be encoded (in input order) and the ones that could not."""

    json: bytes
    encoded: int
    failures: tuple[EncodeFailure, ...]


# --- value helpers the generated code calls ----------------------------------------------------

_TIMESTAMP_SECONDS_MIN = -62135596800  # 0001-01-01T00:00:00Z
TIMESTAMP_SECONDS_MAX = 253402300799  # 9999-12-31T23:59:59Z: the last second RFC 3339 writes
_EPOCH = datetime.datetime(1970, 1, 1)
_CACHE_MAX = 8192
# Events of a batch share a few distinct seconds, and ids (node, job, worker, task) repeat across
# events: formatting each once is most of the timestamp and base64 cost. Both caches are bounded
# by clearing; the GIL keeps each dict operation atomic, and a lost entry only costs a recompute.
_seconds_prefix: dict[int, str] = {}
_base64_of: dict[bytes, str] = {}


def _format_seconds(seconds: int, where: str) -> str:
    if not _TIMESTAMP_SECONDS_MIN <= seconds <= TIMESTAMP_SECONDS_MAX:
        raise TimestampRangeError(
            f"{where}: Timestamp is not valid: Seconds {seconds} must be in range "
            f"[{_TIMESTAMP_SECONDS_MIN}, {TIMESTAMP_SECONDS_MAX}]."
        )
    prefix = (_EPOCH + datetime.timedelta(seconds=seconds)).isoformat()
    if len(_seconds_prefix) >= _CACHE_MAX:
        _seconds_prefix.clear()
    _seconds_prefix[seconds] = prefix
    return prefix


def _bad_nanos(nanos: int, where: str) -> str:
    raise TimestampRangeError(
        f"{where}: Timestamp is not valid: Nanos {nanos} must be in a range [0, 999999999]."
    )


def _timestamp(t: Any, where: str) -> str:
    """``Timestamp.ToJsonString()``: UTC, 0, 3, 6 or 9 fractional digits, 'Z'."""
    seconds = t.seconds
    nanos = t.nanos
    prefix = _seconds_prefix.get(seconds) or _format_seconds(seconds, where)
    if 0 < nanos < 1_000_000_000:
        if nanos % 1000:
            # Most nanos have 9 digits already: skip the slow zero-padding format spec.
            return f"{prefix}.{nanos}Z" if nanos >= 100_000_000 else f"{prefix}.{nanos:09d}Z"
        if nanos % 1_000_000:
            return f"{prefix}.{nanos // 1000:06d}Z"
        return f"{prefix}.{nanos // 1_000_000:03d}Z"
    if nanos == 0:
        return prefix + "Z"
    return _bad_nanos(nanos, where)


def _base64(value: bytes) -> str:
    text = binascii.b2a_base64(value, newline=False).decode("ascii")
    if len(_base64_of) >= _CACHE_MAX:
        _base64_of.clear()
    _base64_of[value] = text
    return text


class _Timestamp(NamedTuple):
    seconds: int
    nanos: int


def timestamp_text(unix_nano: int) -> str:
    """The JSON of `Timestamp.FromNanoseconds(unix_nano)`, as this encoder writes it (for JSON
    written from values rather than messages); TimestampRangeError where RFC 3339 cannot say it."""
    return _timestamp(_Timestamp(*divmod(unix_nano, 1_000_000_000)), _TIMESTAMP)


def base64_text(value: bytes) -> str:
    """The JSON of a bytes field holding `value`, as this encoder writes it."""
    return _base64_of.get(value) or _base64(value)


def _nonfinite(value: float) -> str:
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _float32(value: float) -> float | str:
    if value - value == 0.0:
        shortest: float = type_checkers.ToShortestFloat(value)
        return shortest
    return _nonfinite(value)


# Well-known types whose JSON form is not an object of their fields. Timestamp is generated; the
# others (not in Ray's schema) are delegated to json_format, so the output still matches.
_TIMESTAMP = "google.protobuf.Timestamp"
_DELEGATED_TYPES = frozenset(
    "google.protobuf." + name
    for name in [
        "Any",
        "Duration",
        "FieldMask",
        "ListValue",
        "Struct",
        "Value",
        "DoubleValue",
        "FloatValue",
        "Int64Value",
        "UInt64Value",
        "Int32Value",
        "UInt32Value",
        "BoolValue",
        "StringValue",
        "BytesValue",
    ]
)

_T = FieldDescriptor
_INT64_TYPES = frozenset({_T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_SINT64, _T.TYPE_FIXED64, _T.TYPE_SFIXED64})
_INT32_TYPES = frozenset({_T.TYPE_INT32, _T.TYPE_UINT32, _T.TYPE_SINT32, _T.TYPE_FIXED32, _T.TYPE_SFIXED32})
_FLOAT_TYPES = frozenset({_T.TYPE_DOUBLE, _T.TYPE_FLOAT})


def _is_map(field: DescriptorLike) -> bool:
    return bool(field.type == _T.TYPE_MESSAGE and field.message_type.GetOptions().map_entry)


def _is_timestamp(field: DescriptorLike) -> bool:
    return bool(field.type == _T.TYPE_MESSAGE and field.message_type.full_name == _TIMESTAMP)


def _attr(obj: str, field: DescriptorLike) -> str:
    name: str = field.name
    if name.isidentifier() and not keyword.iskeyword(name):
        return f"{obj}.{name}"
    return f"getattr({obj}, {name!r})"


def _default_value(field: DescriptorLike) -> Any:
    """The JSON value of an unset scalar field without presence (proto3 implicit: the type's zero)."""
    t = field.type
    if t == _T.TYPE_ENUM:
        zero = field.enum_type.values_by_number.get(0)
        return zero.name if zero is not None else 0
    if t in (_T.TYPE_STRING, _T.TYPE_BYTES):
        return ""
    if t in _INT64_TYPES:
        return "0"
    if t == _T.TYPE_BOOL:
        return False
    if t in _INT32_TYPES:
        return 0
    if t in _FLOAT_TYPES:
        return 0.0
    raise TypeError(f"{field.full_name}: no JSON default for field type {t}")


# --- the compiler -------------------------------------------------------------------------------


class _Compiler:
    """Generates and caches one encoder function per message descriptor, for one naming flag.

    Generated functions share one namespace and call each other by global name, so recursive
    message types work and every helper is a (fast, cached) global load.
    """

    def __init__(self, preserve_proto_field_name: bool) -> None:
        self._preserve = preserve_proto_field_name
        self._lock = threading.Lock()
        self._encoders: dict[DescriptorLike, MessageEncoder] = {}
        self._names: dict[DescriptorLike, str] = {}
        self._namespace: dict[str, Any] = {
            "_seconds_prefix": _seconds_prefix,
            "_format_seconds": _format_seconds,
            "_bad_nanos": _bad_nanos,
            "_timestamp": _timestamp,
            "_base64_of": _base64_of,
            "_base64": _base64,
            "_nonfinite": _nonfinite,
            "_float32": _float32,
            "_copysign": math.copysign,
            "_json_format": json_format,
        }

    def encoder_for(self, descriptor: DescriptorLike) -> MessageEncoder:
        found = self._encoders.get(descriptor)
        if found is not None:
            return found
        with self._lock:
            if descriptor in self._encoders:  # another thread compiled it meanwhile
                return self._encoders[descriptor]
            pending = self._name_reachable(descriptor)
            try:
                for d in pending:
                    code = compile(self._source(d), f"<ray_json {d.full_name}>", "exec")
                    exec(code, self._namespace)
            except BaseException:
                for d in pending:  # a half-compiled set must not look compiled next time
                    del self._names[d]
                raise
            for d in pending:
                self._encoders[d] = self._namespace[self._names[d]]
        return self._encoders[descriptor]

    def _name_reachable(self, descriptor: DescriptorLike) -> list[DescriptorLike]:
        pending = []
        stack = [descriptor]
        while stack:
            d = stack.pop()
            if d in self._names:
                continue
            self._names[d] = f"_enc_{len(self._names)}"
            pending.append(d)
            for f in d.fields:
                target = f.message_type
                if target is not None and _is_map(f):
                    target = target.fields_by_name["value"].message_type
                if target is not None:
                    stack.append(target)
        return pending

    def _const(self, value: Any) -> str:
        name = f"_c{len(self._namespace)}"
        self._namespace[name] = value
        return name

    def _source(self, d: DescriptorLike) -> str:
        name = self._names[d]
        if d.full_name == _TIMESTAMP:
            return f"def {name}(m):\n    return _timestamp(m, {d.full_name!r})\n"
        if d.full_name in _DELEGATED_TYPES:
            return (
                f"def {name}(m):\n    return _json_format.MessageToDict(m, "
                "always_print_fields_with_no_presence=True, "
                f"preserving_proto_field_name={self._preserve!r})\n"
            )
        return f"def {name}(m):\n" + "\n".join("    " + line for line in self._body(d)) + "\n"

    def _key(self, field: DescriptorLike) -> str:
        return repr(field.name if self._preserve else field.json_name)

    def _convert(self, field: DescriptorLike, x: str) -> str:
        """An expression turning the value ``x`` of ``field``'s type into its JSON value."""
        t = field.type
        if t == _T.TYPE_MESSAGE or t == _T.TYPE_GROUP:
            if field.message_type.full_name == _TIMESTAMP:
                return f"_timestamp({x}, {field.full_name!r})"
            return f"{self._names[field.message_type]}({x})"
        if t == _T.TYPE_ENUM:
            names = {n: v.name for n, v in field.enum_type.values_by_number.items()}
            return f"{self._const(names)}.get({x}, {x})"
        if t == _T.TYPE_BYTES:
            return f"(_base64_of.get({x}) or _base64({x}))"
        if t in _INT64_TYPES:
            return f"str({x})"
        if t == _T.TYPE_DOUBLE:
            return f"({x} if {x} - {x} == 0.0 else _nonfinite({x}))"
        if t == _T.TYPE_FLOAT:
            return f"_float32({x})"
        return x  # string, bool, 32-bit integers: already their JSON value

    def _default(self, field: DescriptorLike) -> str:
        return repr(_default_value(field))

    def _body(self, descriptor: DescriptorLike) -> list[str]:
        """Builds dict ``d`` from message ``m``: json_format's keys, values and key order."""
        out = ["d = {}"]
        which: dict[str, str] = {}  # oneof name -> local holding WhichOneof()
        for oneof in descriptor.oneofs:
            if len(oneof.fields) > 1:  # one-field oneofs (proto3 `optional`) use `in` instead
                which[oneof.name] = f"o{len(which)}"
                out.append(f"{which[oneof.name]} = m.WhichOneof({oneof.name!r})")
        unset: dict[int, tuple[str, str]] = {}  # field index -> ("is unset" test, default JSON)

        for f in sorted(descriptor.fields, key=lambda f: f.number):
            key, v, value = self._key(f), f"v{f.index}", _attr("m", f)
            if f.is_repeated:
                out.append(f"{v} = {value}")
                out.append(f"if {v}:")
                out.append(f"    d[{key}] = {self._repeated_expression(f, v)}")
                unset[f.index] = (f"not {v}", "{}" if _is_map(f) else "[]")
            elif f.has_presence:
                oneof = f.containing_oneof
                if oneof is not None and oneof.name in which:
                    out.append(f"if {which[oneof.name]} == {f.name!r}:")
                else:
                    out.append(f"if {f.name!r} in m:")
                if _is_timestamp(f):
                    out.extend("    " + line for line in _timestamp_code(value, f"d[{key}]", f.full_name))
                else:
                    out.append(f"    d[{key}] = {self._convert(f, value)}")
            else:
                out.append(f"{v} = {value}")
                # -0.0 is set (its bits differ from the default) although it is falsy.
                is_set = f"({v} or _copysign(1.0, {v}) < 0.0)" if f.type in _FLOAT_TYPES else v
                out.append(f"if {is_set}:")
                out.append(f"    d[{key}] = {self._convert(f, v)}")
                unset[f.index] = (f"not {is_set}", self._default(f))

        for f in descriptor.fields:  # declaration order
            if f.index in unset:
                test, default = unset[f.index]
                out.append(f"if {test}:")
                out.append(f"    d[{self._key(f)}] = {default}")
        out.append("return d")
        return out

    def _repeated_expression(self, f: DescriptorLike, v: str) -> str:
        if _is_map(f):
            return self._map_expression(f, v)
        item = self._convert(f, "e")
        return f"list({v})" if item == "e" else f"[{item} for e in {v}]"

    def _map_expression(self, f: DescriptorLike, v: str) -> str:
        entry = f.message_type
        key_field = entry.fields_by_name["key"]
        value_field = entry.fields_by_name["value"]
        if key_field.type == _T.TYPE_BOOL:
            k = "('true' if k else 'false')"
        elif key_field.type == _T.TYPE_STRING:
            k = "k"
        else:
            k = "str(k)"
        if value_field.type == _T.TYPE_DOUBLE:
            # Bind the value once: a second map lookup costs more than the walrus.
            value = f"(y if (y := {v}[k]) - y == 0.0 else _nonfinite(y))"
        else:
            value = self._convert(value_field, f"{v}[k]")
        return f"{{{k}: {value} for k in {v}}}"


def _timestamp_code(value: str, target: str, where: str) -> list[str]:
    """``_timestamp`` inlined: nearly every event holds timestamps, often several."""
    return [
        f"t = {value}",
        "ts = t.seconds",
        "tn = t.nanos",
        f"tp = _seconds_prefix.get(ts) or _format_seconds(ts, {where!r})",
        "if 0 < tn < 1000000000:",
        "    if tn % 1000:",
        f"        {target} = f'{{tp}}.{{tn}}Z' if tn >= 100000000 else f'{{tp}}.{{tn:09d}}Z'",
        "    elif tn % 1000000:",
        f"        {target} = f'{{tp}}.{{tn // 1000:06d}}Z'",
        "    else:",
        f"        {target} = f'{{tp}}.{{tn // 1000000:03d}}Z'",
        "elif tn == 0:",
        f"    {target} = tp + 'Z'",
        "else:",
        f"    _bad_nanos(tn, {where!r})",
    ]


_COMPILERS = {False: _Compiler(False), True: _Compiler(True)}


# --- the compiled writer's schema ----------------------------------------------------------------

# Kinds and labels of _ray_json_encode.c, which writes an event's JSON from its wire bytes.
_E_FALLBACK, _E_INT32, _E_UINT32, _E_SINT32, _E_FIXED32, _E_SFIXED32 = range(6)
_E_INT64, _E_UINT64, _E_SINT64, _E_FIXED64, _E_SFIXED64 = range(6, 11)
_E_BOOL, _E_STRING, _E_BYTES, _E_ENUM, _E_DOUBLE, _E_MESSAGE, _E_TIMESTAMP = range(11, 18)
_L_IMPLICIT, _L_PRESENCE, _L_REPEATED, _L_MAP = range(4)
# The same numbers as native/_ray_json_encode.c's E_ and L_ kinds (it exports them; checked at bind).
ENCODE_KINDS = {
    "E_FALLBACK": _E_FALLBACK,
    "E_INT32": _E_INT32,
    "E_UINT32": _E_UINT32,
    "E_SINT32": _E_SINT32,
    "E_FIXED32": _E_FIXED32,
    "E_SFIXED32": _E_SFIXED32,
    "E_INT64": _E_INT64,
    "E_UINT64": _E_UINT64,
    "E_SINT64": _E_SINT64,
    "E_FIXED64": _E_FIXED64,
    "E_SFIXED64": _E_SFIXED64,
    "E_BOOL": _E_BOOL,
    "E_STRING": _E_STRING,
    "E_BYTES": _E_BYTES,
    "E_ENUM": _E_ENUM,
    "E_DOUBLE": _E_DOUBLE,
    "E_MESSAGE": _E_MESSAGE,
    "E_TIMESTAMP": _E_TIMESTAMP,
    "L_IMPLICIT": _L_IMPLICIT,
    "L_PRESENCE": _L_PRESENCE,
    "L_REPEATED": _L_REPEATED,
    "L_MAP": _L_MAP,
}
_E_SCALARS = {
    _T.TYPE_INT32: _E_INT32,
    _T.TYPE_UINT32: _E_UINT32,
    _T.TYPE_SINT32: _E_SINT32,
    _T.TYPE_FIXED32: _E_FIXED32,
    _T.TYPE_SFIXED32: _E_SFIXED32,
    _T.TYPE_INT64: _E_INT64,
    _T.TYPE_UINT64: _E_UINT64,
    _T.TYPE_SINT64: _E_SINT64,
    _T.TYPE_FIXED64: _E_FIXED64,
    _T.TYPE_SFIXED64: _E_SFIXED64,
    _T.TYPE_BOOL: _E_BOOL,
    _T.TYPE_STRING: _E_STRING,
    _T.TYPE_BYTES: _E_BYTES,
    _T.TYPE_DOUBLE: _E_DOUBLE,
}  # float (ToShortestFloat) is left to Python
_MAX_ENUM_TABLE = 1024


def _encode_kind(field: DescriptorLike, preserve: bool, schemas: dict[Any, list[Any]]) -> tuple[int, Any]:
    """(kind, extra) of one field's values for the compiled writer."""
    if field.type == _T.TYPE_ENUM:
        values = field.enum_type.values_by_number
        if not values or min(values) < 0 or max(values) >= _MAX_ENUM_TABLE:
            return _E_FALLBACK, None
        names: list[bytes | None] = [None] * (max(values) + 1)
        for number, value in values.items():
            names[number] = orjson.dumps(value.name)
        return _E_ENUM, tuple(names)
    if field.type == _T.TYPE_MESSAGE:
        if field.message_type.full_name == _TIMESTAMP:
            return _E_TIMESTAMP, None
        if field.message_type.full_name in _DELEGATED_TYPES:
            return _E_FALLBACK, None
        return _E_MESSAGE, _encode_schema(field.message_type, preserve, schemas)
    return _E_SCALARS.get(field.type, _E_FALLBACK), None


def _encode_schema(descriptor: DescriptorLike, preserve: bool, schemas: dict[Any, list[Any]]) -> list[Any]:
    """One message's schema for _ray_json_encode.c: [fields by number, fields in declaration order,
    number of oneofs], each field (number, key JSON, kind, label, oneof or -1, JSON of its value when
    unset (None: left out), extra, declaration index); the same keys, defaults and names as the
    generated encoders."""
    schema = schemas.get(descriptor)
    if schema is not None:
        return schema
    schema = schemas[descriptor] = [(), (), 0]  # filled below; a recursive type finds it here
    oneofs: dict[str, int] = {}
    fields = []
    for index, f in enumerate(descriptor.fields):
        oneof = -1
        if f.containing_oneof is not None and len(f.containing_oneof.fields) > 1:
            oneof = oneofs.setdefault(f.containing_oneof.full_name, len(oneofs))
        default: bytes | None = None
        if _is_map(f):
            key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            kind, value_extra = _encode_kind(value, preserve, schemas)
            key_kind = _E_SCALARS.get(key.type, _E_FALLBACK)
            value_default = None if kind in (_E_MESSAGE, _E_FALLBACK) else orjson.dumps(_default_value(value))
            if key_kind == _E_FALLBACK:
                kind = _E_FALLBACK
            label, extra, default = _L_MAP, (key_kind, kind, value_extra, value_default), b"{}"
        else:
            kind, extra = _encode_kind(f, preserve, schemas)
            if f.is_repeated:
                label, default = _L_REPEATED, b"[]"
            elif f.has_presence:
                label = _L_PRESENCE
            else:
                label, default = _L_IMPLICIT, orjson.dumps(_default_value(f))
        key_json = orjson.dumps(f.name if preserve else f.json_name)
        fields.append((f.number, key_json, kind, label, oneof, default, extra, index))
    by_number: list[Any] = [None] * (max((f[0] for f in fields), default=0) + 1)
    for spec in fields:
        by_number[spec[0]] = spec
    schema[:] = [tuple(by_number), tuple(fields), len(oneofs)]
    return schema


@functools.cache
def _event_wire_schema(preserve: bool) -> list[Any]:
    """RayEvent's schema for the compiled writer, made once per naming flag."""
    return _encode_schema(RayEvent.DESCRIPTOR, preserve, {})


_compiled_encoder = _ray_json_encode is not None and native.ENABLED
if _compiled_encoder:
    native.check_numbers(_ray_json_encode, ENCODE_KINDS)
    _ray_json_encode.bind(orjson.dumps)


def writes_compiled() -> bool:
    """Whether wire-format events are written by the compiled writer (faster than the generated
    encoder)."""
    return _compiled_encoder


# --- public API ---------------------------------------------------------------------------------


class RayEventJsonEncoder:
    """Encodes RayEvents (or any message) exactly as Ray's aggregator does, only faster.

    ``preserve_proto_field_name`` picks snake_case proto names over camelCase JSON names, like
    Ray's ``RAY_DASHBOARD_AGGREGATOR_AGENT_PRESERVE_PROTO_FIELD_NAME``.
    """

    def __init__(self, preserve_proto_field_name: bool = False) -> None:
        self.preserve_proto_field_name = preserve_proto_field_name
        self._compiler = _COMPILERS[bool(preserve_proto_field_name)]
        self._event_descriptor = RayEvent.DESCRIPTOR
        self._encode_event = self._compiler.encoder_for(RayEvent.DESCRIPTOR)
        self._parse = RayEvent.FromString
        self._wire_schema = _event_wire_schema(bool(preserve_proto_field_name)) if _compiled_encoder else None

    def to_dict(self, message: Message) -> dict[str, Any]:
        """Equal to ``json.loads(MessageToJson(message, always_print_fields_with_no_presence=True,
        preserving_proto_field_name=...))``, key order included.

        Raises TimestampRangeError for a timestamp RFC 3339 cannot express, and TypeError for a
        well-known type whose JSON is not an object (Timestamp, Duration, Struct, wrappers...).
        """
        descriptor = message.DESCRIPTOR
        if descriptor is self._event_descriptor:
            return self._encode_event(message)
        if descriptor.full_name == _TIMESTAMP or descriptor.full_name in _DELEGATED_TYPES:
            raise TypeError(f"{descriptor.full_name} is not encoded as a JSON object")
        return self._compiler.encoder_for(descriptor)(message)

    def event_dict(self, event: RayEvent) -> dict[str, Any]:
        """``to_dict(event)`` for a RayEvent, read back from the compiled writer's JSON of its wire
        bytes where that is built (the same text, so the same dict, key order and types included,
        sooner); an event it does not write, through
        ``to_dict``, which raises as it does."""
        if self._wire_schema is not None:
            (written,) = _ray_json_encode.encode_each([event.SerializeToString()], self._wire_schema)
            if written is not None:
                loaded: dict[str, Any] = orjson.loads(written)
                return loaded
        return self.to_dict(event)

    def encode(self, events: Iterable[Message]) -> bytes:
        """A compact JSON array of ``events``; raises EventEncodeError for the first bad one."""
        events = _sequence(events)
        try:
            return orjson.dumps(self._dicts(events))
        except Exception:
            _raise_first_failure(events, self.to_dict)
            raise

    def encode_serialized(self, payloads: Iterable[bytes]) -> bytes:
        """A compact JSON array of wire-format RayEvents; raises EventEncodeError for the first bad one."""
        payloads = _sequence(payloads)
        try:
            return self._array_from_wire(payloads)
        except Exception:
            _raise_first_failure(payloads, self._dict_from_wire)
            raise

    def try_encode(self, events: Iterable[Message]) -> EncodeResult:
        """Encodes every event that can be; the others are reported in ``failures``, never raised.

        As fast as ``encode`` when nothing fails.
        """
        events = _sequence(events)
        try:
            dicts = self._dicts(events)
        except Exception:
            return _encode_each(events, self.to_dict)
        return EncodeResult(orjson.dumps(dicts), len(dicts), ())

    def try_encode_serialized(self, payloads: Iterable[bytes]) -> EncodeResult:
        """Like ``try_encode`` for wire-format RayEvents (undecodable bytes are failures too)."""
        payloads = _sequence(payloads)
        try:
            return EncodeResult(self._array_from_wire(payloads), len(payloads), ())
        except Exception:
            return _encode_each(payloads, self._dict_from_wire)

    def _dicts(self, events: Sequence[Message]) -> list[dict[str, Any]]:
        to_dict = self.to_dict
        return [to_dict(e) for e in events]

    def _array_from_wire(self, payloads: Sequence[bytes]) -> bytes:
        """The JSON array, written from the wire bytes where compiled (each event the compiled
        writer leaves goes through the generated encoder); raises at the first bad event."""
        if self._wire_schema is None:
            encode_event, parse = self._encode_event, self._parse  # the aggregator's hot loop
            return orjson.dumps([encode_event(parse(p)) for p in payloads])
        written = _ray_json_encode.encode_each(list(payloads), self._wire_schema)
        items = [
            item if item is not None else orjson.dumps(self._dict_from_wire(payloads[index]))
            for index, item in enumerate(written)
        ]
        return b"[" + b",".join(items) + b"]"

    def _dict_from_wire(self, payload: bytes) -> dict[str, Any]:
        return self._encode_event(self._parse(payload))


def _sequence(items: Iterable[Any]) -> Sequence[Any]:
    """The slow paths walk a failed batch again, so a one-shot iterator is materialised first."""
    return items if isinstance(items, Sequence) else list(items)


def _encode_each(items: Sequence[Any], encode_one: Callable[[Any], dict[str, Any]]) -> EncodeResult:
    encoded: list[dict[str, Any]] = []
    failures: list[EncodeFailure] = []
    for index, item in enumerate(items):
        try:
            encoded.append(encode_one(item))
        except Exception as exc:  # one bad event must not sink its batch: report it instead
            failures.append(EncodeFailure(index, _reason(exc)))
    return EncodeResult(orjson.dumps(encoded), len(encoded), tuple(failures))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, DecodeError):
        return f"not a wire-format RayEvent: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _raise_first_failure(items: Iterable[Any], encode_one: Callable[[Any], dict[str, Any]]) -> None:
    """Finds which event sank a batch (the fast path does not track indices)."""
    for index, item in enumerate(items):
        try:
            encode_one(item)
        except Exception as exc:
            raise EventEncodeError(index, _reason(exc)) from exc
