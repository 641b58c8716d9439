"""Every RayEvent as an OpenTelemetry log record, and back.

The record's body is the whole event exactly as the aggregator posts it (protobuf JSON mapping), so
a receiver rebuilds the RayEvent without loss; its attributes repeat the event's fields flattened
to dotted paths (for querying in a backend that does not index bodies) plus the entity ids in the
hex form Ray's tracing uses, so records join with spans.
"""

from __future__ import annotations

import operator
import random
import struct
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_otel_events import native
from ray_otel_events.encoding import ray_json_decode
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events.registry import event_type_name
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.event_heads import AttributeValue, EventHead, entity_attributes, read_head
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

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
        timestamp_ns=otlp_wire.unix_nano(event.timestamp),
        severity_number=severity,
        severity_text=_SEVERITY_TEXT[event.severity] if severity else "",
        body=body,
        attributes=attributes,
    )


def from_log_body(body: Mapping[str, Any]) -> RayEvent:
    """Rebuild the RayEvent from a record body (camelCase or proto field names both accepted)."""
    event = RayEvent()
    ray_json_decode.parse_dict(dict(body), event)
    return event


# -- the same record, straight to OTLP wire bytes -------------------------------------------------
#
# The bridge writes one record per RayEvent; building `LogRecordFields` and then encoding it walks
# the event four times (two dict conversions, the flattening, the encoding). This walks the camelCase
# dict once and writes the body's KeyValues and the flattened attributes together. What depends only
# on where a value sits (its keys, encoded; its attribute name; how to descend into it) is worked
# out once per path of the schema, in a `_Plan`; entries whose value repeats (enum names, ids,
# the session, small numbers) are encoded once per field and kept while they repeat.

_FieldInfo = tuple[str, Any, Any]  # (proto name, message descriptor to descend into, map value's)
_fields_by_json: dict[Any, dict[str, _FieldInfo]] = {}
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


_KVLIST_ENTRY = b"\x0a"  # KeyValueList.values = 1
_LOG_ATTRIBUTE = otlp_wire.LOG_RECORD_ATTRIBUTES
_LEAF_VALUES_MAX = 1024
_CACHED_PATHS_MAX = 4096  # leaves and plans kept (paths include list indexes and map keys: data)
_cached_paths = 0


def _keep() -> bool:
    """Whether one more leaf or plan may be kept: past the bound, they are made for one use."""
    global _cached_paths
    if _cached_paths >= _CACHED_PATHS_MAX:
        return False
    _cached_paths += 1
    return True


class _Leaf:
    """One field at one path holding a string, int or bool: its two encoded keys, and the entries
    of the values seen, while they repeat. A field whose values do not repeat (ids, timestamps)
    stops being cached after `_LEAF_VALUES_MAX` values instead of churning a shared cache."""

    __slots__ = ("attr_key", "body_key", "values")

    def __init__(self, body_key: str, attr_key: str) -> None:
        self.body_key = otlp_wire.key_field(body_key)
        self.attr_key = otlp_wire.key_field(attr_key)
        # keyed by the value (strings) or by (type, value) (ints and bools: True == 1)
        self.values: dict[Any, tuple[bytes, bytes]] | None = {}

    def entries(self, value: str) -> tuple[bytes, bytes]:
        """(body entry, attribute entry) of this field holding the string `value`."""
        values = self.values
        if values is not None:
            pair = values.get(value)
            if pair is not None:
                return pair
        return self._made(value, otlp_wire.string_value_field(value.encode()))

    def number_entries(self, value: int) -> tuple[bytes, bytes]:
        """The same for an int or a bool."""
        cache_key = (type(value), value)
        values = self.values
        if values is not None:
            pair = values.get(cache_key)
            if pair is not None:
                return pair
        return self._made(cache_key, otlp_wire.value_field(otlp_wire.any_value(value)))

    def _made(self, cache_key: Any, value_field: bytes) -> tuple[bytes, bytes]:
        """Both entries around one encoded value, kept while this field's values repeat."""
        pair = (
            otlp_wire.entry(_KVLIST_ENTRY, self.body_key, value_field),
            otlp_wire.entry(_LOG_ATTRIBUTE, self.attr_key, value_field),
        )
        self._remember(cache_key, pair)
        return pair

    def _remember(self, key: Any, pair: tuple[bytes, bytes]) -> None:
        values = self.values
        if values is not None:
            if len(values) < _LEAF_VALUES_MAX:
                values[key] = pair
            else:
                self.values = None


_NO_FIELDS: dict[str, _FieldInfo] = {}


class _Plan:
    """How one message (`descriptor`) or map (`descriptor` None) at one attribute path is walked:
    per key, made once, its leaf, the plan of a message or map under it, or the plans of the
    messages in a list under it (by index)."""

    __slots__ = ("children", "fields", "items", "keys", "leaves", "path", "value_descriptor")

    def __init__(self, path: str, descriptor: Any, value_descriptor: Any = None) -> None:
        """A message's plan (`descriptor`), or a map's (None) whose values are `value_descriptor`
        messages (None: a map of plain values, a Struct, or an unknown field's object)."""
        self.path = path
        self.fields = _json_fields(descriptor) if descriptor is not None else _NO_FIELDS
        self.value_descriptor = value_descriptor
        self.leaves: dict[str, _Leaf] = {}
        self.children: dict[str, _Plan] = {}
        self.items: dict[str, list[_Plan]] = {}
        self.keys: dict[str, bytes] = {}  # KeyValue.key fields of message, map and list entries

    def where(self, key: str) -> str:
        """The attribute path of `key`'s value: proto field names in a message, keys in a map."""
        info = self.fields.get(key)
        return f"{self.path}.{info[0] if info is not None else key}"

    def leaf(self, key: str) -> _Leaf:
        leaf = _Leaf(key, self.where(key))
        if _keep():
            self.leaves[key] = leaf
        return leaf

    def key_field(self, key: str) -> bytes:
        encoded = self.keys.get(key)
        if encoded is None:
            encoded = otlp_wire.key_field(key)
            if _keep():
                self.keys[key] = encoded
        return encoded

    def descriptors(self, key: str) -> tuple[Any, Any]:
        """(descriptor, map value descriptor) of a message value under `key`, as `_Plan` takes them."""
        if self.fields is _NO_FIELDS:  # a map: its values are messages of one type, or maps
            return self.value_descriptor, None
        info = self.fields.get(key)
        if info is None:  # unknown field: its object is walked as a map of plain values
            return None, None
        return info[1], info[2]

    def child(self, key: str) -> _Plan:
        """The plan of the message or map held by `key`."""
        descriptor, value_descriptor = self.descriptors(key)
        plan = _Plan(self.where(key), descriptor, value_descriptor)
        if _keep():
            self.children[key] = plan
        return plan

    def item(self, key: str, index: int) -> _Plan:
        """The plan of the message (or map) at `index` of the list held by `key`."""
        plans = self.items.get(key)
        if plans is None:
            plans = []
            if _keep():
                self.items[key] = plans
        if index < len(plans):
            return plans[index]
        plan = _Plan(f"{self.where(key)}.{index}", self.descriptors(key)[0])
        if index == len(plans) and _keep():
            plans.append(plan)
        return plan


_ROOT = _Plan("ray.event", RayEvent.DESCRIPTOR)
_NESTED = (Mapping, list)


def _framed(key: bytes, value: bytes) -> bytes:
    """A KeyValueList entry: the encoded key and a serialized AnyValue."""
    return otlp_wire.entry(_KVLIST_ENTRY, key, otlp_wire.value_field(value))


def _walk_python(obj: Mapping[str, Any], plan: _Plan, attrs: list[bytes]) -> bytes:
    """The KeyValueList entries of `obj` (camelCase, as the body holds it); appends the flattened
    attribute entries (proto names under the plan's path) to `attrs`, as `_flatten` would yield
    them."""
    entries: list[bytes] = []
    add, add_attr = entries.append, attrs.append
    leaves = plan.leaves
    for key, value in obj.items():
        kind = type(value)
        if kind is str:  # most leaves
            body_entry, attr_entry = (leaves.get(key) or plan.leaf(key)).entries(value)
        elif kind is int or kind is bool:
            body_entry, attr_entry = (leaves.get(key) or plan.leaf(key)).number_entries(value)
        else:
            add(_other_entry(key, value, plan, attrs))
            continue
        add(body_entry)
        add_attr(attr_entry)
    return b"".join(entries)


def _other_entry(key: str, value: Any, plan: _Plan, attrs: list[bytes]) -> bytes:
    """The body entry of a value that is not a string, int or bool (appending its attributes)."""
    kind = type(value)
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        child = plan.children.get(key) or plan.child(key)
        return _framed(plan.key_field(key), _walk_value(value, child, attrs))
    if kind is list and any(isinstance(item, _NESTED) for item in value):
        items = [_list_item(item, plan, key, i, attrs) for i, item in enumerate(value)]
        return _framed(plan.key_field(key), otlp_wire.array_value(items))
    # floats, lists of plain values, None
    entry = otlp_wire.kv_entry(_KVLIST_ENTRY, key, value)
    _flat_leaf(plan.where(key), value, attrs)
    return entry


def _list_item(item: Any, plan: _Plan, key: str, index: int, attrs: list[bytes]) -> bytes:
    """The serialized AnyValue of item `index` of the list under `key`."""
    if type(item) is dict or isinstance(item, Mapping):
        return _walk_value(item, plan.item(key, index), attrs)
    return _any_value(item, f"{plan.where(key)}.{index}", plan.descriptors(key)[0], attrs)


try:  # the same walk compiled (setup.py builds it where a C compiler is present)
    from ray_otel_events.native import _record_walk
except ImportError:
    _record_walk = None  # type: ignore[assignment]
_walk: Callable[[Mapping[str, Any], _Plan, list[bytes]], bytes] = _walk_python
if _record_walk is not None and native.ENABLED:
    _record_walk.bind(_other_entry, _list_item, _walk_python, Mapping, _LEAF_VALUES_MAX)
    _walk = _record_walk.walk


def _walk_value(value: Mapping[str, Any], plan: _Plan, attrs: list[bytes]) -> bytes:
    """The serialized AnyValue of a message or map."""
    return otlp_wire.kvlist_value(_walk(value, plan, attrs))


def _any_value(value: Any, path: str, descriptor: Any, attrs: list[bytes]) -> bytes:
    """The serialized AnyValue of a list item that is not an object (lists nest in Structs)."""
    if isinstance(value, list) and not all(isinstance(item, str) for item in value):
        items = [
            _walk_value(item, _Plan(f"{path}.{i}", descriptor), attrs)
            if isinstance(item, Mapping)
            else _any_value(item, f"{path}.{i}", descriptor, attrs)
            for i, item in enumerate(value)
        ]
        return otlp_wire.array_value(items)
    _flat_leaf(path, value, attrs)
    return otlp_wire.any_value(value)


def _flat_leaf(path: str, value: Any, attrs: list[bytes]) -> None:
    """A leaf (or a list of leaves) as `_flatten` makes attributes of it."""
    for key, flat in _flatten(path, value):
        attrs.append(otlp_wire.kv_entry(_LOG_ATTRIBUTE, key, flat))


def log_record_wire(
    event: RayEvent,
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
    *,
    flags: int = 0,
    extra_attributes: bytes = b"",
    posted: Mapping[str, Any] | None = None,
    head: EventHead | None = None,
) -> bytes:
    """A serialized LogRecord equal to the one `to_log_record`'s fields encode to; `extra_attributes`
    (entries tagged `otlp_wire.LOG_RECORD_ATTRIBUTES`) follow the event's. `posted`: the JSON
    object the event was read from, when it holds the event and nothing else
    (`receivers.ray_events_http.PostedEvent`): the body is then that object as it was posted,
    which is the same as the event's own JSON for what Ray's aggregator posts, without making it
    again. `head`: the event's `read_head`, when the caller has it."""
    if head is None:
        head = read_head(event)
    return head_log_record(
        event, head, posted, trace_id, span_id, observed_time_unix_nano, flags, extra_attributes
    )


def head_log_record(
    event: RayEvent,
    head: EventHead,
    posted: Mapping[str, Any] | None,
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
    flags: int = 0,
    extra_attributes: bytes = b"",
) -> bytes:
    """`log_record_wire` with the head given and positional arguments."""
    attrs: list[bytes] = []
    body = _walk(_camel.event_dict(event) if posted is None else posted, _ROOT, attrs)
    attrs.append(head.attributes)
    if extra_attributes:
        attrs.append(extra_attributes)
    return _record(head, body, attrs, trace_id, span_id, observed_time_unix_nano, flags)


# -- records of events that differ from one event in a few values ----------------------------------
#
# A traced task's events differ from the task before's in their ids and times only: the same
# function, job, worker, session and states. A shape keeps one event's JSON object; per event it
# copies the objects and lists on the way to its slots (paths of keys and list indexes), puts the
# event's values there and walks the copy (the compiled walk, whose leaves of values that repeat
# are kept written): the event is never built, nor read back into JSON.

Slot = tuple[str | int, ...]
_SlotTree = dict[Any, Any]  # key or index -> the index of its value, or the tree under it


def _slot_tree(obj: Any, slots: Mapping[Slot, int]) -> _SlotTree:
    """`slots` as a tree over `obj`; ValueError for a path `obj` does not hold."""
    tree: _SlotTree = {}
    for path, index in slots.items():
        node, at = tree, obj
        for depth, key in enumerate(path):
            try:
                at = at[key]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"no value at {path}") from None
            if depth == len(path) - 1:
                node[key] = index
            else:
                node = node.setdefault(key, {})
    return tree


def _filled(obj: Any, tree: _SlotTree, values: Sequence[Any]) -> Any:
    """A copy of `obj` (a dict or list) holding `values` at the tree's slots; the rest shared."""
    out = obj.copy()
    for key, sub in tree.items():
        out[key] = values[sub] if type(sub) is int else _filled(out[key], sub, values)
    return out


# A record's bytes as a %-format of its values' bytes, and what picks them, in their order there,
# from [the slots' values..., time, trace id, span id, observed time].
_Template = tuple[bytes, Callable[[list[bytes]], tuple[bytes, ...]]]
# A template as pieces of bytes and, between each two, the index of the value that goes there (the
# slot values, then the time, trace id, span id and observed time): what compiled code fills.
TemplateParts = tuple[tuple[bytes, ...], tuple[int, ...]]
TEMPLATES_MAX = 64  # per shape: value lengths vary a little (times drop trailing zeros)
_STAND_IN_MIN = 8  # a shorter stand-in could occur in the record by chance
_STAND_IN_LETTERS = "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ"
_pack_fixed64 = struct.Struct("<Q").pack


_random = random.Random()  # stand-ins need to be unlikely in a record, not secret


def _stand_in(length: int) -> str:
    """Random text of `length` bytes (letters no id or time of ours is made of)."""
    return "".join(_random.choices(_STAND_IN_LETTERS, k=length))


def _filled_template(
    template: _Template,
    values: list[bytes],
    time_unix_nano: int,
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
) -> bytes:
    """The record a template writes with these values (UTF-8), times and ids."""
    text, pick = template
    values += (_pack_fixed64(time_unix_nano), trace_id, span_id, _pack_fixed64(observed_time_unix_nano))
    return text % pick(values)


def _template_of(pieces: list[bytes], order: list[int]) -> _Template:
    text = b"%b".join([piece.replace(b"%", b"%%") for piece in pieces])
    if len(order) == 1:
        only = order[0]
        return text, lambda values: (values[only],)
    return text, operator.itemgetter(*order)


class RecordShape:
    """The records of events equal to `event` but for the values at `slots` (paths into its JSON
    object) and at `attribute_slots` (entity attributes, by name), each naming the index of its
    value: `record(values, ...)` is `log_record_wire` of the event holding `values` there, without
    the event.

    A slot's value must not change which keys its object holds or their order (a value at its
    field's default moves to the end of its object): the caller makes a shape per such case. Make
    one with `shape_of`, which checks it on the event it was made from."""

    __slots__ = ("_entity", "_fields", "_object", "_parts", "_templates", "_tree")

    def __init__(
        self, event: RayEvent, slots: Mapping[Slot, int], attribute_slots: Mapping[str, int]
    ) -> None:
        head = read_head(event)
        self._fields = record_fields(head.event_type, head.severity)
        self._object = _camel.event_dict(event)
        self._tree = _slot_tree(self._object, slots)
        entity: list[bytes | tuple[bytes, int]] = []
        for key, value in entity_attributes(event).items():
            index = attribute_slots.get(key)
            if index is None:
                entity.append(otlp_wire.attributes({key: value}, _LOG_ATTRIBUTE))
            else:
                entity.append((otlp_wire.key_field(key), index))
        self._entity = entity
        # (value lengths, fixed fields' presence, flags, extra attributes) -> its template, or
        # None where one cannot be made
        self._templates: dict[Hashable, _Template | None] = {}
        self._parts: dict[Hashable, TemplateParts] = {}  # the templates made, as their parts

    def record(
        self,
        values: Sequence[Any],
        time_unix_nano: int,
        trace_id: bytes,
        span_id: bytes,
        observed_time_unix_nano: int,
        flags: int = 0,
        extra_attributes: bytes = b"",
    ) -> bytes:
        """The record of the event holding `values` at the slots; `time_unix_nano`: its timestamp
        as OTLP carries it (`otlp_wire.time_or_unknown`).

        Values that are all text are put into a template of the record's bytes made for their
        lengths (`_template`): where a value's length does not move any other byte, the record is
        the template with each value's bytes in its place, and no walk is needed."""
        return self.record_and_parts(
            values, time_unix_nano, trace_id, span_id, observed_time_unix_nano, flags, extra_attributes
        )[0]

    def record_and_parts(
        self,
        values: Sequence[Any],
        time_unix_nano: int,
        trace_id: bytes,
        span_id: bytes,
        observed_time_unix_nano: int,
        flags: int = 0,
        extra_attributes: bytes = b"",
    ) -> tuple[bytes, TemplateParts | None]:
        """`record(...)`, and the parts of the template it was written from (None: walked), for
        compiled code that writes the records of the same lengths from them."""
        try:
            encoded = [value.encode() for value in values]
        except (AttributeError, UnicodeEncodeError):  # not all text: walked
            pass
        else:
            key = (
                tuple(map(len, encoded)),
                time_unix_nano != 0,
                observed_time_unix_nano != 0,
                len(trace_id),
                len(span_id),
                flags,
                extra_attributes,
            )
            try:
                template = self._templates[key]
            except KeyError:
                template = self._template(
                    key,
                    values,
                    time_unix_nano,
                    trace_id,
                    span_id,
                    observed_time_unix_nano,
                    flags,
                    extra_attributes,
                )
            if template is not None:
                filled = _filled_template(
                    template, encoded, time_unix_nano, trace_id, span_id, observed_time_unix_nano
                )
                return filled, self._parts.get(key)
        walked = self._walked(
            values, time_unix_nano, trace_id, span_id, observed_time_unix_nano, flags, extra_attributes
        )
        return walked, None

    def _template(
        self,
        key: Hashable,
        values: Sequence[Any],
        time_unix_nano: int,
        trace_id: bytes,
        span_id: bytes,
        observed_time_unix_nano: int,
        flags: int,
        extra_attributes: bytes,
    ) -> _Template | None:
        """The record written with a random stand-in of the same length for each value, id and
        time, cut wherever each stand-in stands (None if one is not found); kept only if it writes
        this record as the walk does."""
        if len(self._templates) >= TEMPLATES_MAX:
            return None  # lengths past the bound are walked
        stand_ins = [_stand_in(len(value.encode())) for value in values]
        times = [_random.getrandbits(63) | 1, _random.getrandbits(63) | 1]
        ids = [_stand_in(len(trace_id)).encode(), _stand_in(len(span_id)).encode()]
        made = self._walked(
            stand_ins,
            times[0] if time_unix_nano else 0,
            ids[0],
            ids[1],
            times[1] if observed_time_unix_nano else 0,
            flags,
            extra_attributes,
        )
        marks = [part.encode() for part in stand_ins]
        marks += (_pack_fixed64(times[0]) if time_unix_nano else b"", ids[0], ids[1])
        marks.append(_pack_fixed64(times[1]) if observed_time_unix_nano else b"")
        found: list[tuple[int, int]] = []
        for index, mark in enumerate(marks):
            if not mark:
                continue
            at = made.find(mark)
            if len(mark) < _STAND_IN_MIN or at < 0:
                return self._keep(key, None)
            while at >= 0:  # a body value is in the body and in its flattened attribute
                found.append((at, index))
                at = made.find(mark, at + len(mark))
        found.sort()
        pieces, order, end = [], [], 0
        for at, index in found:
            if at < end:  # stand-ins that overlap
                return self._keep(key, None)
            pieces.append(made[end:at])
            order.append(index)
            end = at + len(marks[index])
        pieces.append(made[end:])
        template = _template_of(pieces, order)
        filled = _filled_template(
            template,
            [value.encode() for value in values],
            time_unix_nano,
            trace_id,
            span_id,
            observed_time_unix_nano,
        )
        walked = self._walked(
            values, time_unix_nano, trace_id, span_id, observed_time_unix_nano, flags, extra_attributes
        )
        if filled != walked:
            return self._keep(key, None)
        self._parts[key] = (tuple(pieces), tuple(order))
        return self._keep(key, template)

    def _keep(self, key: Hashable, template: _Template | None) -> _Template | None:
        self._templates[key] = template
        return template

    def _walked(
        self,
        values: Sequence[Any],
        time_unix_nano: int,
        trace_id: bytes,
        span_id: bytes,
        observed_time_unix_nano: int,
        flags: int,
        extra_attributes: bytes,
    ) -> bytes:
        """The record walked from the shape's JSON object with `values` in it."""
        attrs: list[bytes] = []
        body = _walk(_filled(self._object, self._tree, values), _ROOT, attrs)
        for part in self._entity:
            if isinstance(part, bytes):
                attrs.append(part)
            else:
                value = otlp_wire.value_field(otlp_wire.any_value(values[part[1]]))
                attrs.append(otlp_wire.entry(_LOG_ATTRIBUTE, part[0], value))
        if extra_attributes:
            attrs.append(extra_attributes)
        number, text, name = self._fields
        return _write_record(
            time_unix_nano, observed_time_unix_nano, number, text, body, attrs, trace_id, span_id, flags, name
        )


def shape_of(
    event: RayEvent,
    slots: Mapping[Slot, int],
    attribute_slots: Mapping[str, int],
    values: Sequence[Any],
) -> RecordShape | None:
    """The shape of `event`'s records (see `RecordShape`), `values` being the event's own values at
    the slots; None when it does not write the event's own record with them (a slot that is not
    in the event's object, or a value the caller formats otherwise than its JSON)."""
    try:
        shape = RecordShape(event, slots, attribute_slots)
    except ValueError:
        return None
    head = read_head(event)
    probe = (b"\x01" * 16, b"\x02" * 8, 7)
    expected = log_record_wire(event, *probe)
    return shape if shape.record(values, head.time_ns, *probe) == expected else None


def parts_log_record(
    head: EventHead,
    body: bytes | None,
    attributes: bytes,
    source: Mapping[str, Any] | RayEvent | bytes,
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
) -> bytes:
    """The record of an event read as `posted_events.EventParts`: its body entries and flattened
    attributes as read (`body`), else walked from `source` (the posted object, the event, or its
    wire bytes). The bridge's call per event."""
    if body is None:
        body, attributes = record_entries(source)
    return _record(head, body, [attributes, head.attributes], trace_id, span_id, observed_time_unix_nano, 0)


def record_entries(source: Mapping[str, Any] | RayEvent | bytes) -> tuple[bytes, bytes]:
    """(body entries, flattened `ray.event.*` attribute entries) of an event's record, walked from
    the object it was posted as, the event, or its wire bytes."""
    event = RayEvent.FromString(source) if isinstance(source, bytes) else source
    attrs: list[bytes] = []
    body = _walk(_camel.event_dict(event) if isinstance(event, RayEvent) else event, _ROOT, attrs)
    return body, b"".join(attrs)


def _record(
    head: EventHead,
    body: bytes,
    attrs: list[bytes],
    trace_id: bytes,
    span_id: bytes,
    observed_time_unix_nano: int,
    flags: int,
) -> bytes:
    fields = _record_fields.get((head.event_type, head.severity)) or _fields_of(
        head.event_type, head.severity
    )
    return _write_record(
        head.time_ns,
        observed_time_unix_nano,
        fields[0],
        fields[1],
        body,
        attrs,
        trace_id,
        span_id,
        flags,
        fields[2],
    )


# (event type, severity) -> (severity number, severity text, event name) of their records.
_record_fields: dict[tuple[int, int], tuple[int, str, str]] = {}


def record_fields(event_type: int, severity: int) -> tuple[int, str, str]:
    """(severity number, severity text, event name) of an event type's records at a severity."""
    return _record_fields.get((event_type, severity)) or _fields_of(event_type, severity)


def _fields_of(event_type: int, severity: int) -> tuple[int, str, str]:
    number = SEVERITY_NUMBER.get(severity, 0)
    fields = (
        number,
        _SEVERITY_TEXT[severity] if number else "",
        semconv.event_name_for(event_type_name(event_type)),
    )
    if len(_record_fields) < 1024:  # the types and severities of one schema, and a few unknown numbers
        _record_fields[(event_type, severity)] = fields
    return fields


_write_record = otlp_wire.write_event_log_record
