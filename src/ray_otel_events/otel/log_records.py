"""Every RayEvent as an OpenTelemetry log record, and back.

The record's body is the whole event exactly as the aggregator posts it (protobuf JSON mapping), so
a receiver rebuilds the RayEvent without loss; its attributes repeat the event's fields flattened
to dotted paths (for querying in a backend that does not index bodies) plus the entity ids in the
hex form Ray's tracing uses, so records join with spans.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events.registry import REGISTRY, event_type_name
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

AttributeValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]

# RayEvent.Severity -> OTel SeverityNumber (the lowest number of each range, as the data model asks).
SEVERITY_NUMBER: dict[int, int] = {
    RayEvent.Severity.EVENT_SEVERITY_UNSPECIFIED: 0,
    RayEvent.Severity.TRACE: 1,
    RayEvent.Severity.DEBUG: 5,
    RayEvent.Severity.INFO: 9,
    RayEvent.Severity.WARNING: 13,
    RayEvent.Severity.ERROR: 17,
    RayEvent.Severity.FATAL: 21,
}
_SEVERITY_TEXT: dict[int, str] = {number: name for name, number in RayEvent.Severity.items()}

_ATTRIBUTE_PREFIX = "ray.event."

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

_camel = RayEventJsonEncoder()
_proto_names = RayEventJsonEncoder(preserve_proto_field_name=True)


@dataclass(frozen=True)
class LogRecordFields:
    """What any OTel logs API or OTLP encoder needs to emit one RayEvent as a record."""

    event_name: str
    timestamp_ns: int
    severity_number: int
    severity_text: str
    body: dict[str, Any]
    attributes: dict[str, AttributeValue]


@dataclass(frozen=True)
class _EntityFields:
    """Which of the id, attempt and submission fields one payload type has (asking a message for
    a field it lacks raises inside `getattr`, the costliest part of this per record)."""

    payload: str
    ids: tuple[tuple[str, str], ...]
    attempt: str | None
    submission_id: bool


_entity_fields: dict[int, _EntityFields | None] = {}


def _fields_of(event_type: int) -> _EntityFields | None:
    if event_type in _entity_fields:
        return _entity_fields[event_type]
    spec = REGISTRY.get(event_type)
    found = None
    if spec is not None:
        payload_type = RayEvent.DESCRIPTOR.fields_by_name[spec.payload_field].message_type
        assert payload_type is not None  # a payload is a message
        names = payload_type.fields_by_name
        bytes_type = FieldDescriptor.TYPE_BYTES
        found = _EntityFields(
            payload=spec.payload_field,
            ids=tuple(
                (f, a) for f, a in _ID_ATTRIBUTES.items() if f in names and names[f].type == bytes_type
            ),
            attempt=next((f for f in ("attempt_number", "task_attempt") if f in names), None),
            submission_id="submission_id" in names,
        )
    _entity_fields[event_type] = found
    return found


def entity_attributes(event: RayEvent) -> dict[str, AttributeValue]:
    """Entity ids in Ray's hex attribute names, plus attempt, type and session."""
    attrs: dict[str, AttributeValue] = {
        semconv.RAY_EVENT_TYPE: event_type_name(event.event_type),
        semconv.RAY_SESSION_NAME: event.session_name,
    }
    fields = _fields_of(event.event_type)
    if fields is None:
        return attrs
    payload = getattr(event, fields.payload)
    for field, attr in fields.ids:
        value = getattr(payload, field)
        if value:
            attrs[attr] = value.hex()
    if fields.attempt is not None:
        attrs[semconv.RAY_TASK_ATTEMPT] = int(getattr(payload, fields.attempt))
    if fields.submission_id and payload.submission_id:
        attrs[semconv.RAY_SUBMISSION_ID] = payload.submission_id
    if event.node_id and semconv.RAY_NODE_ID not in attrs:
        attrs[semconv.RAY_NODE_ID] = event.node_id.hex()
    return attrs


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, AttributeValue]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}", item)
    elif isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            yield prefix, list(value)
        else:
            for index, item in enumerate(value):
                yield from _flatten(f"{prefix}.{index}", item)
    elif isinstance(value, (str, bool, int, float)):
        yield prefix, value


def to_log_record(event: RayEvent) -> LogRecordFields:
    body = _camel.to_dict(event)
    attributes: dict[str, AttributeValue] = {}
    for key, value in _proto_names.to_dict(event).items():
        attributes.update(_flatten(_ATTRIBUTE_PREFIX + key, value))
    attributes.update(entity_attributes(event))
    severity = SEVERITY_NUMBER.get(event.severity, 0)
    return LogRecordFields(
        event_name=semconv.event_name_for(event_type_name(event.event_type)),
        timestamp_ns=otlp_wire.time_or_unknown(event.timestamp.ToNanoseconds()),
        severity_number=severity,
        severity_text=_SEVERITY_TEXT[event.severity] if severity else "",
        body=body,
        attributes=attributes,
    )


def from_log_body(body: Mapping[str, Any]) -> RayEvent:
    """Rebuild the RayEvent from a record body (camelCase or proto field names both accepted)."""
    event = RayEvent()
    json_format.ParseDict(dict(body), event)
    return event


# -- the same record, straight to OTLP wire bytes -------------------------------------------------
#
# The bridge writes one record per RayEvent; building `LogRecordFields` and then encoding it walks
# the event four times (two dict conversions, the flattening, the encoding). This walks the camelCase
# dict once, guided by the descriptors (so map keys, user data, are never renamed), and writes the
# body's KeyValues and the flattened attributes together. Entries whose value is a string repeat a
# lot (enum names, node/job/worker ids, the session): each is encoded once and kept in a bounded cache.

_FieldInfo = tuple[str, Any, Any]  # (proto name, message descriptor to descend into, map value's)
_fields_by_json: dict[Any, dict[str, _FieldInfo]] = {}
_ENTRY_CACHE_MAX = 1 << 16
_body_entries: dict[tuple[str, str], bytes] = {}
_attr_entries: dict[tuple[str, str], bytes] = {}
_OPAQUE = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})


def _json_fields(descriptor: Any) -> dict[str, _FieldInfo]:
    fields = _fields_by_json.get(descriptor)
    if fields is None:
        fields = {}
        for field in descriptor.fields:
            sub = field.message_type
            if sub is not None and sub.GetOptions().map_entry:
                value_type = sub.fields_by_name["value"].message_type
                fields[field.json_name] = (field.name, None, value_type)
            elif sub is not None and sub.full_name not in _OPAQUE:
                fields[field.json_name] = (field.name, sub, None)
            else:
                fields[field.json_name] = (field.name, None, None)
        _fields_by_json[descriptor] = fields
    return fields


def _entry(cache: dict[tuple[str, str], bytes], tag: bytes, key: str, value: Any) -> bytes:
    """One repeated KeyValue entry (`tag` + length + KeyValue), cached when the value is a string."""
    if type(value) is str:
        cached = cache.get((key, value))
        if cached is not None:
            return cached
    kv = otlp_wire.key_value(key, value)
    entry = tag + otlp_wire.varint(len(kv)) + kv
    if type(value) is str:
        if len(cache) >= _ENTRY_CACHE_MAX:
            cache.clear()
        cache[(key, value)] = entry
    return entry


_KVLIST_ENTRY = b"\x0a"  # KeyValueList.values = 1
_LOG_ATTRIBUTE = otlp_wire.LOG_RECORD_ATTRIBUTES


class _Leaf:
    """One string field of the schema at one path: its two encoded keys, and the entries of the
    values seen, while they repeat. A field whose values do not repeat (ids, timestamps) stops
    being cached after `_LEAF_VALUES_MAX` values instead of churning a shared cache."""

    __slots__ = ("attr_key", "body_key", "values")

    def __init__(self, body_key: str | None, attr_key: str) -> None:
        """`body_key` None: an attribute only (its body entry is empty)."""
        self.body_key = otlp_wire.key_field(body_key) if body_key is not None else None
        self.attr_key = otlp_wire.key_field(attr_key)
        self.values: dict[str, tuple[bytes, bytes]] | None = {}

    def entries(self, value: str) -> tuple[bytes, bytes]:
        """(body entry, attribute entry) of this field holding `value`."""
        values = self.values
        if values is not None:
            pair = values.get(value)
            if pair is not None:
                return pair
        data = value.encode()
        body_key = self.body_key
        pair = (
            otlp_wire.string_entry(_KVLIST_ENTRY, body_key, data) if body_key is not None else b"",
            otlp_wire.string_entry(_LOG_ATTRIBUTE, self.attr_key, data),
        )
        if values is not None:
            if len(values) < _LEAF_VALUES_MAX:
                values[value] = pair
            else:
                self.values = None
        return pair


_LEAF_VALUES_MAX = 1024
_LEAF_FIELDS_MAX = 4096  # paths include list indexes; past this, fields are encoded uncached
_leaves: dict[tuple[str, str], _Leaf] = {}
_NO_FIELDS: dict[str, _FieldInfo] = {}


def _leaf(path: str, key: str, fields: dict[str, _FieldInfo]) -> _Leaf:
    leaf = _leaves.get((path, key))
    if leaf is None:
        info = fields.get(key)
        leaf = _Leaf(key, f"{path}.{info[0] if info is not None else key}")
        if len(_leaves) < _LEAF_FIELDS_MAX:
            _leaves[(path, key)] = leaf
    return leaf


def _walk(obj: Mapping[str, Any], descriptor: Any, path: str, attrs: list[bytes]) -> bytes:
    """The KeyValueList entries of `obj` (camelCase, as the body holds it); appends the flattened
    attribute entries (proto names under `path`) to `attrs`, as `_flatten` would yield them."""
    fields = _json_fields(descriptor) if descriptor is not None else _NO_FIELDS
    entries: list[bytes] = []
    leaves = _leaves
    for key, value in obj.items():
        if type(value) is str:  # most leaves
            leaf = leaves.get((path, key)) or _leaf(path, key, fields)
            body_entry, attr_entry = leaf.entries(value)
            entries.append(body_entry)
            attrs.append(attr_entry)
            continue
        info = fields.get(key)
        name, sub, map_value = info if info is not None else (key, None, None)
        where = f"{path}.{name}"
        if isinstance(value, Mapping):
            if map_value is not None or info is None or sub is None:
                inner = _walk_map(value, map_value, where, attrs)
            else:
                inner = _walk(value, sub, where, attrs)
            kv = otlp_wire.key_with_value(key, otlp_wire.kvlist_value(inner))
            entries.append(_KVLIST_ENTRY + otlp_wire.varint(len(kv)) + kv)
        elif isinstance(value, list) and any(isinstance(item, (Mapping, list)) for item in value):
            items = [_walk_value(item, sub, f"{where}.{i}", attrs) for i, item in enumerate(value)]
            kv = otlp_wire.key_with_value(key, otlp_wire.array_value(items))
            entries.append(_KVLIST_ENTRY + otlp_wire.varint(len(kv)) + kv)
        else:
            entries.append(_entry(_body_entries, _KVLIST_ENTRY, key, value))
            _flat_leaf(where, value, attrs)
    return b"".join(entries)


def _walk_map(obj: Mapping[str, Any], value_descriptor: Any, path: str, attrs: list[bytes]) -> bytes:
    """A map or Struct: keys are data, kept as they are."""
    entries: list[bytes] = []
    for key, value in obj.items():
        where = f"{path}.{key}"
        if isinstance(value, (Mapping, list)) and not (
            isinstance(value, list) and all(isinstance(item, str) for item in value)
        ):
            inner = _walk_value(value, value_descriptor, where, attrs)
            kv = otlp_wire.key_with_value(key, inner)
            entries.append(_KVLIST_ENTRY + otlp_wire.varint(len(kv)) + kv)
        else:
            entries.append(_entry(_body_entries, _KVLIST_ENTRY, key, value))
            _flat_leaf(where, value, attrs)
    return b"".join(entries)


def _walk_value(value: Any, descriptor: Any, path: str, attrs: list[bytes]) -> bytes:
    """The serialized AnyValue of a list item or map value."""
    if isinstance(value, Mapping):
        inner = (
            _walk(value, descriptor, path, attrs)
            if descriptor is not None
            else _walk_map(value, None, path, attrs)
        )
        return otlp_wire.kvlist_value(inner)
    if isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            _flat_leaf(path, value, attrs)
            return otlp_wire.any_value(value)
        items = [_walk_value(item, descriptor, f"{path}.{i}", attrs) for i, item in enumerate(value)]
        return otlp_wire.array_value(items)
    _flat_leaf(path, value, attrs)
    return otlp_wire.any_value(value)


def _flat_leaf(path: str, value: Any, attrs: list[bytes]) -> None:
    """A leaf (or a list of leaves) as `_flatten` makes attributes of it."""
    for key, flat in _flatten(path, value):
        attrs.append(_entry(_attr_entries, _LOG_ATTRIBUTE, key, flat))


def log_record_wire(
    event: RayEvent,
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
    *,
    flags: int = 0,
    extra_attributes: bytes = b"",
) -> bytes:
    """A serialized LogRecord equal to the one `to_log_record`'s fields encode to; `extra_attributes`
    (entries tagged `otlp_wire.LOG_RECORD_ATTRIBUTES`) follow the event's."""
    attrs: list[bytes] = []
    body = otlp_wire.kvlist_value(_walk(_camel.to_dict(event), RayEvent.DESCRIPTOR, "ray.event", attrs))
    for key, value in entity_attributes(event).items():
        if type(value) is str:
            leaf = _leaves.get(("", key))
            if leaf is None:
                leaf = _leaves[("", key)] = _Leaf(None, key)  # a handful of entity attribute names
            attrs.append(leaf.entries(value)[1])
        else:
            attrs.append(_entry(_attr_entries, _LOG_ATTRIBUTE, key, value))
    attrs.append(extra_attributes)
    severity = SEVERITY_NUMBER.get(event.severity, 0)
    return otlp_wire.log_record_from_parts(
        time_unix_nano=otlp_wire.time_or_unknown(event.timestamp.ToNanoseconds()),
        observed_time_unix_nano=observed_time_unix_nano,
        severity_number=severity,
        severity_text=_SEVERITY_TEXT[event.severity] if severity else "",
        event_name=semconv.event_name_for(event_type_name(event.event_type)),
        body=body,
        attributes=b"".join(attrs),
        trace_id=trace_id,
        span_id=span_id,
        flags=flags,
    )
