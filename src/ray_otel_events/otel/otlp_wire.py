"""OTLP log records written straight to protobuf bytes, without building messages in Python.

Building a LogRecord whose body and attributes hold a whole RayEvent through the generated classes
costs one Python-to-upb call per nested field. The wire format of the
few OTLP messages involved is small and stable, so this module writes it directly from plain
Python values: the same fields and values `plain_records.python_to_any_value` would set, decoded
by any OTLP receiver to the same message. Keys seen before are encoded once (a bounded cache).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from ray_otel_events import native

try:  # the same writers compiled (setup.py builds them where a C compiler is present)
    from ray_otel_events.native import _otlp_wire
except ImportError:
    _otlp_wire = None  # type: ignore[assignment]
_compiled = _otlp_wire is not None and native.ENABLED

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack

# Field tags: (field number << 3) | wire type.
_ANY_STRING = b"\x0a"  # AnyValue.string_value = 1
_ANY_BOOL = b"\x10"  # bool_value = 2
_ANY_INT = b"\x18"  # int_value = 3
_ANY_DOUBLE = b"\x21"  # double_value = 4 (fixed64)
_ANY_ARRAY = b"\x2a"  # array_value = 5
_ANY_KVLIST = b"\x32"  # kvlist_value = 6
_ANY_BYTES = b"\x3a"  # bytes_value = 7
_REPEATED_1 = b"\x0a"  # ArrayValue.values / KeyValueList.values = 1
_KV_KEY = b"\x0a"  # KeyValue.key = 1
_KV_VALUE = b"\x12"  # KeyValue.value = 2

_KEY_CACHE_MAX = 4096
_key_cache: dict[str, bytes] = {}


_MAX_FIXED64 = (1 << 64) - 1


def time_or_unknown(unix_nano: int) -> int:
    """A time OTLP can carry (unsigned 64-bit nanoseconds since the epoch), else 0, OTLP's
    "unknown": a RayEvent's timestamp may be any time from year 1 to 9999."""
    return unix_nano if 0 <= unix_nano <= _MAX_FIXED64 else 0


_SECONDS_MIN, _SECONDS_MAX = -62135596800, 253402300799  # what a Timestamp may hold: years 1-9999


def unix_nano(timestamp: Any) -> int:
    """A protobuf Timestamp as `time_or_unknown` nanoseconds; an invalid one raises ValueError as
    `Timestamp.ToNanoseconds` does (which costs three Python calls more)."""
    seconds, nanos = timestamp.seconds, timestamp.nanos
    if _SECONDS_MIN <= seconds <= _SECONDS_MAX and 0 <= nanos <= 999_999_999:
        return time_or_unknown(seconds * 1_000_000_000 + nanos)
    return time_or_unknown(timestamp.ToNanoseconds())


def _varint_slow(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Lengths and small numbers dominate (dozens per record): one and two byte varints are looked up.
_SMALL_VARINTS = [_varint_slow(n) for n in range(1 << 14)]


def varint(value: int) -> bytes:
    if 0 <= value < 16384:
        return _SMALL_VARINTS[value]
    return _varint_slow(value)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """The serialized AnyValue of a JSON-like value (dict -> kvlist, list -> array, bool before int)."""
    if isinstance(value, str):
        data = value.encode()
        return _ANY_STRING + varint(len(data)) + data
    if isinstance(value, bool):
        return _ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _ANY_INT + varint(value)
    if isinstance(value, float):
        return _ANY_DOUBLE + _pack_double(value)
    if isinstance(value, Mapping):
        return _length_delimited(_ANY_KVLIST, key_values(value))
    if isinstance(value, (list, tuple)):
        items = b"".join(_length_delimited(_REPEATED_1, any_value(v)) for v in value)
        return _length_delimited(_ANY_ARRAY, items)
    if isinstance(value, bytes):
        return _ANY_BYTES + varint(len(value)) + value
    if value is None:
        return b""
    raise TypeError(f"cannot represent {type(value).__name__} as an OTLP AnyValue")


def _key(key: str) -> bytes:
    encoded = _key_cache.get(key)
    if encoded is None:
        data = key.encode()
        encoded = _KV_KEY + varint(len(data)) + data
        if len(_key_cache) < _KEY_CACHE_MAX:
            _key_cache[key] = encoded
    return encoded


def key_field(key: str) -> bytes:
    """KeyValue's key field, encoded (to build entries with `entry`)."""
    data = key.encode()
    return _KV_KEY + varint(len(data)) + data


def value_field(value: bytes) -> bytes:
    """KeyValue's value field holding a serialized AnyValue."""
    return _KV_VALUE + varint(len(value)) + value


def string_value_field(data: bytes) -> bytes:
    """KeyValue's value field holding the string AnyValue of UTF-8 `data`."""
    return value_field(_ANY_STRING + varint(len(data)) + data)


def entry(tag: bytes, key: bytes, value: bytes) -> bytes:
    """One repeated KeyValue entry (`tag`, length, KeyValue) from its `key_field` and `value_field`:
    a key or value shared by many entries is encoded once."""
    return tag + varint(len(key) + len(value)) + key + value


def key_value(key: str, value: Any) -> bytes:
    """A serialized KeyValue (a None value leaves its value unset)."""
    return _key(key) if value is None else _key(key) + _length_delimited(_KV_VALUE, any_value(value))


def kvlist_value(entries: bytes) -> bytes:
    """An AnyValue holding a KeyValueList, from its concatenated `values` entries."""
    return _length_delimited(_ANY_KVLIST, entries)


def array_value(values: list[bytes]) -> bytes:
    """An AnyValue holding an ArrayValue, from serialized AnyValues."""
    return _length_delimited(_ANY_ARRAY, b"".join(_length_delimited(_REPEATED_1, v) for v in values))


def key_values(values: Mapping[str, Any]) -> bytes:
    """Repeated KeyValue (field 1 of KeyValueList), as the concatenated entries (a None value
    leaves the entry's value unset, as python_to_any_value does inside a kvlist)."""
    parts = []
    for key, value in values.items():
        kv = _key(key) if value is None else _key(key) + _length_delimited(_KV_VALUE, any_value(value))
        parts.append(_REPEATED_1 + varint(len(kv)) + kv)
    return b"".join(parts)


_ENTRY_CACHE_MAX = 1 << 16
_string_entries: dict[tuple[bytes, str, str], bytes] = {}


def kv_entry(tag: bytes, key: str, value: Any) -> bytes:
    """One repeated KeyValue entry (`tag`, length, `key_value`). Entries holding a string are kept
    (bounded): attribute names and most of their values repeat from record to record."""
    if type(value) is str:
        cached = _string_entries.get((tag, key, value))
        if cached is not None:
            return cached
    kv = key_value(key, value)
    made = tag + varint(len(kv)) + kv
    if type(value) is str:
        if len(_string_entries) >= _ENTRY_CACHE_MAX:
            _string_entries.clear()
        _string_entries[(tag, key, value)] = made
    return made


def attributes(values: Mapping[str, Any], tag: bytes) -> bytes:
    """A message's repeated KeyValue field `tag` (e.g. LogRecord.attributes = 6 -> b"\\x32");
    a None value is written as an empty AnyValue."""
    if _compiled and type(values) is dict:
        written = _otlp_wire.attributes(values, tag)  # None: a value that is not plain, written below
        if written is not None:
            return written
    return b"".join(
        [
            kv_entry(tag, key, value) if value is not None else entry(tag, _key(key), value_field(b""))
            for key, value in values.items()
        ]
    )


LOG_RECORD_ATTRIBUTES = b"\x32"  # LogRecord.attributes = 6: the tag of one attribute entry


def log_record(
    *,
    time_unix_nano: int,
    observed_time_unix_nano: int,
    severity_number: int,
    severity_text: str,
    event_name: str,
    body: Any,
    attrs: Mapping[str, Any],
    trace_id: bytes = b"",
    span_id: bytes = b"",
) -> bytes:
    """A serialized opentelemetry.proto.logs.v1.LogRecord (default values omitted, as proto3 does)."""
    return log_record_from_parts(
        time_unix_nano=time_unix_nano,
        observed_time_unix_nano=observed_time_unix_nano,
        severity_number=severity_number,
        severity_text=severity_text,
        event_name=event_name,
        body=None if body is None else any_value(body),
        attributes=attributes(attrs, LOG_RECORD_ATTRIBUTES),
        trace_id=trace_id,
        span_id=span_id,
    )


def log_record_from_parts(
    *,
    time_unix_nano: int,
    observed_time_unix_nano: int,
    severity_number: int,
    severity_text: str,
    event_name: str,
    body: bytes | None,
    attributes: bytes,
    trace_id: bytes = b"",
    span_id: bytes = b"",
    flags: int = 0,
    dropped_attributes: int = 0,
) -> bytes:
    """The same, from the serialized body AnyValue and the concatenated attribute entries."""
    parts = []
    if time_unix_nano:
        parts.append(b"\x09" + _pack_fixed64(time_unix_nano))  # 1, fixed64
    if severity_number:
        parts.append(b"\x10" + varint(severity_number))  # 2
    if severity_text:
        parts.append(_length_delimited(b"\x1a", severity_text.encode()))  # 3
    if body is not None:
        parts.append(_length_delimited(b"\x2a", body))  # 5
    parts.append(attributes)  # 6
    if dropped_attributes:
        parts.append(b"\x38" + varint(dropped_attributes))  # 7
    if flags:
        parts.append(b"\x45" + _pack_fixed32(flags))  # 8, fixed32
    if trace_id:
        parts.append(_length_delimited(b"\x4a", trace_id))  # 9
    if span_id:
        parts.append(_length_delimited(b"\x52", span_id))  # 10
    if observed_time_unix_nano:
        parts.append(b"\x59" + _pack_fixed64(observed_time_unix_nano))  # 11, fixed64
    if event_name:
        parts.append(_length_delimited(b"\x62", event_name.encode()))  # 12
    return b"".join(parts)


def event_log_record(
    time_unix_nano: int,
    observed_time_unix_nano: int,
    severity_number: int,
    severity_text: str,
    body_entries: bytes | None,
    attributes: list[bytes],
    trace_id: bytes,
    span_id: bytes,
    flags: int,
    event_name: str,
) -> bytes:
    """`log_record_from_parts` of a KeyValueList body (its entries; None: no body) and a list of
    attribute entries: one call for what a RayEvent's record needs once its entries are written."""
    if _compiled:
        return _otlp_wire.log_record(
            time_unix_nano,
            observed_time_unix_nano,
            severity_number,
            severity_text,
            body_entries,
            attributes,
            trace_id,
            span_id,
            flags,
            event_name,
        )
    return log_record_from_parts(
        time_unix_nano=time_unix_nano,
        observed_time_unix_nano=observed_time_unix_nano,
        severity_number=severity_number,
        severity_text=severity_text,
        event_name=event_name,
        body=None if body_entries is None else kvlist_value(body_entries),
        attributes=b"".join(attributes),
        trace_id=trace_id,
        span_id=span_id,
        flags=flags,
    )


SPAN_ATTRIBUTES = b"\x4a"  # Span.attributes = 9: the tag of one attribute entry


# `event_log_record` without its Python frame where compiled (the bridge writes one per RayEvent).
write_event_log_record: Callable[..., bytes] = _otlp_wire.log_record if _compiled else event_log_record


def span_event_fields(name: str, attrs: Mapping[str, Any]) -> bytes:
    """An Event's name and attributes (fields 2 and 3), for `span_event`; the same for every
    event of one kind, so a caller may keep them."""
    return string_field(b"\x12", name) + attributes(attrs, b"\x1a")


def span_event(time_unix_nano: int, fields: bytes) -> bytes:
    """One Span.events entry (field 11): Event{time_unix_nano, then `span_event_fields`}."""
    event = b"\x09" + _pack_fixed64(time_unix_nano) + fields  # Event.time_unix_nano = 1, fixed64
    return _length_delimited(b"\x5a", event)


def string_field(tag: bytes, value: str) -> bytes:
    """A string field of any message (`tag` = field number << 3 | 2)."""
    return _length_delimited(tag, value.encode())


bytes_field = _length_delimited  # a bytes or message field of any message (`tag`, length, payload)


def _framed(tag: bytes, size: int) -> bytes:
    """A length-delimited field's tag and length, for a payload of `size` bytes written after it."""
    return tag + (_SMALL_VARINTS[size] if size < 16384 else _varint_slow(size))


def _resource_logs_parts(resource: bytes, scope: bytes, records: list[bytes]) -> tuple[list[bytes], int]:
    """The parts of a serialized ResourceLogs (see `resource_logs`), and their length: framed
    where they are, so that the request is copied once, by one join."""
    parts = [b"", b"\x0a", b"", resource, b"", b"\x0a", b"", scope]
    small = _SMALL_VARINTS
    for r in records:
        size = len(r)
        parts += (b"\x12" + small[size] if size < 16384 else _framed(b"\x12", size), r)
    parts[6] = varint(len(scope))
    scope_logs = 1 + len(parts[6]) + len(scope) + sum(map(len, parts[8:]))
    parts[2] = varint(len(resource))
    parts[4] = _framed(b"\x12", scope_logs)
    size = 1 + len(parts[2]) + len(resource) + len(parts[4]) + scope_logs
    return parts, size


def resource_logs(resource: bytes, scope: bytes, records: list[bytes]) -> bytes:
    """A serialized ResourceLogs{resource, scope_logs: [ScopeLogs{scope, log_records}]} from the
    serialized Resource, InstrumentationScope and LogRecords; given Spans, the ResourceSpans
    (the same field numbers and types)."""
    return b"".join(_resource_logs_parts(resource, scope, records)[0])


def logs_request(resource: bytes, scope: bytes, records: list[bytes]) -> bytes:
    """A serialized ExportLogsServiceRequest holding one ResourceLogs."""
    parts, size = _resource_logs_parts(resource, scope, records)
    parts[0] = _framed(b"\x0a", size)
    return b"".join(parts)


def log_record_entries(records: list[bytes]) -> bytes:
    """Serialized LogRecords as `ScopeLogs.log_records` entries, one after the other."""
    small = _SMALL_VARINTS
    return b"".join(
        [
            part
            for r in records
            for part in (b"\x12" + small[len(r)] if len(r) < 16384 else _framed(b"\x12", len(r)), r)
        ]
    )


def logs_request_of_entries(resource: bytes, scope: bytes, entries: list[bytes], size: int) -> bytes:
    """`logs_request` of LogRecords already written as `ScopeLogs.log_records` entries
    (`log_record_entries`, any number to an element of `entries`, `size` bytes in all)."""
    head = [b"", b"\x0a", varint(len(resource)), resource, b"", b"\x0a", varint(len(scope)), scope]
    scope_logs = 1 + len(head[6]) + len(scope) + size
    head[4] = _framed(b"\x12", scope_logs)
    head[0] = _framed(b"\x0a", 1 + len(head[2]) + len(resource) + len(head[4]) + scope_logs)
    return b"".join(head + entries)


# -- one request from many one-item envelopes ------------------------------------------------------
#
# Queues hold each span or record as its own ResourceSpans/ResourceLogs (a self-contained item).
# Parsing every item back into messages to regroup a batch costs a Python call per field; the two envelopes
# share one shape (1 resource, 2 scope entries, 3 schema_url; in a scope entry 1 scope, 2 items,
# 3 schema_url), so the batch is regrouped on the wire, copying the items' bytes as they are.


def _read_varint(data: bytes | memoryview, pos: int, most: int = 10) -> tuple[int, int]:
    """A varint of at most `most` bytes (10: any; 5: a key, as upb reads one) and the position
    after it; ValueError when it runs longer or past the end."""
    result = shift = 0
    for at in range(pos, min(pos + most, len(data))):
        byte = data[at]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at + 1
        shift += 7
    raise ValueError("malformed protobuf wire bytes: a varint runs too long or past the end")


def _length_fields(data: bytes | memoryview) -> list[tuple[int, memoryview]]:
    """(field number, payload) of a message whose fields are all length-delimited; the payloads
    are views into `data`, not copies. Keys are read as upb reads them (5 bytes, 32 bits at most)."""
    view = memoryview(data)
    fields: list[tuple[int, memoryview]] = []
    pos, end = 0, len(data)
    while pos < end:
        key = data[pos]
        pos += 1
        if key >= 0x80:
            key, pos = _read_varint(data, pos - 1, 5)
            if key > 0xFFFFFFFF:
                raise ValueError("malformed protobuf wire bytes: a key past 32 bits")
        if key & 7 != 2:
            raise ValueError(f"field {key >> 3} has wire type {key & 7}, not length-delimited")
        size, pos = _read_varint(data, pos)
        if pos + size > end:
            raise ValueError("a field runs past the end of its message")
        fields.append((key >> 3, view[pos : pos + size]))
        pos += size
    return fields


def _split_envelope(data: bytes | memoryview) -> tuple[bytes, list[memoryview], bytes]:
    """(field 1, every field 2, field 3) of an envelope or scope entry."""
    head = tail = b""
    middle: list[memoryview] = []
    for number, payload in _length_fields(data):
        if number == 2:
            middle.append(payload)
        elif number == 1:
            head = payload.tobytes()
        elif number == 3:
            tail = payload.tobytes()
        else:
            raise ValueError(f"unexpected field {number} in an OTLP envelope")
    return head, middle, tail


def _one_item(item: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(resource, scope, the item's entry as framed in its scope entry) of an envelope holding one
    scope entry with one item and no schema URLs (what `OtlpItemEncoder` writes); None for any
    other shape, which the general reader takes."""
    try:
        if item[0] != 0x0A:
            return None
        size, pos = _read_varint(item, 1)
        resource, pos = item[pos : pos + size], pos + size
        if item[pos] != 0x12:
            return None
        size, pos = _read_varint(item, pos + 1)
        if pos + size != len(item) or item[pos] != 0x0A:
            return None
        size, pos = _read_varint(item, pos + 1)
        scope, pos = item[pos : pos + size], pos + size
        if item[pos] != 0x12:
            return None
        size, end = _read_varint(item, pos + 1)
        if end + size != len(item):
            return None
        return resource, scope, item[pos:]
    except (IndexError, ValueError):
        return None


# (resource, schema_url) -> (scope, schema_url) -> the items' framed entries, in queue order
_Groups = dict[tuple[bytes, bytes], dict[tuple[bytes, bytes], list[bytes]]]


def _group(
    groups: _Groups, resource: tuple[bytes, bytes], scope: tuple[bytes, bytes], framed: list[bytes]
) -> None:
    scopes = groups.get(resource)
    if scopes is None:
        scopes = groups[resource] = {}
    held = scopes.get(scope)
    if held is None:
        scopes[scope] = framed
    else:
        held.extend(framed)


def merge_envelopes(items: list[bytes]) -> bytes:
    """The serialized Export{Trace,Logs}ServiceRequest of one-item ResourceSpans/ResourceLogs:
    one entry per (resource, schema_url), one scope entry per (scope, schema_url) within it,
    items in queue order. Raises ValueError on an envelope of another shape."""
    if _compiled and type(items) is list:
        merged = _otlp_wire.merge(items)  # None: an item of another shape, read below
        if merged is not None:
            return merged
    resources: _Groups = {}
    for item in items:
        one = _one_item(item)
        if one is not None:
            resource, scope, framed = one
            _group(resources, (resource, b""), (scope, b""), [framed])
            continue
        try:
            resource, scoped, schema = _split_envelope(item)
            split = [_split_envelope(entry) for entry in scoped]
        except IndexError:
            raise ValueError("an OTLP envelope ends inside a field") from None
        for scope, records, scope_schema in split:
            framed_records = [_length_delimited(b"\x12", bytes(record)) for record in records]
            _group(resources, (resource, schema), (scope, scope_schema), framed_records)
    out: list[bytes] = []
    for (resource, schema), scopes in resources.items():
        parts = [_length_delimited(b"\x0a", resource)]
        for (scope, scope_schema), entries in scopes.items():
            entry = [_length_delimited(b"\x0a", scope), *entries]
            if scope_schema:
                entry.append(_length_delimited(b"\x1a", scope_schema))
            parts.append(_length_delimited(b"\x12", b"".join(entry)))
        if schema:
            parts.append(_length_delimited(b"\x1a", schema))
        out.append(_length_delimited(b"\x0a", b"".join(parts)))
    return b"".join(out)
