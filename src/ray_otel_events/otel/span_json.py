"""Spans and log records as the SDK's own JSON lines, without the SDK's per-item resource round trip.

Ray's bundled hook writes `ReadableSpan.to_json(indent=None)` per line, and tools that read its
files expect exactly that form. The SDK method re-serialises and re-parses the resource for every
span (`json.loads(resource.to_json())`) and builds a dict only to dump it. Here the resource's
JSON is cached per Resource object and the line is written directly from the span's fields, each
value encoded as `json.dumps` encodes it, so the output is byte-identical (tests compare against
the SDK method over random spans) at about a fifth of the cost. Span lines are written on the
process's background thread, which shares the GIL with task submission: their cost shows there.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceState,
    format_span_id,
    format_trace_id,
)

from ray_otel_events import native
from ray_otel_events.otel import semconv

try:  # span lines' ISO times compiled (setup.py builds them where a C compiler is present)
    from ray_otel_events.native import _span_json
except ImportError:
    _span_json = None  # type: ignore[assignment]

_UTC = datetime.UTC
_str = json.encoder.encode_basestring_ascii  # what json.dumps does to a str, in C
_dumps = json.JSONEncoder().encode  # json.dumps with its defaults, without the per-call argument checks
# The C encoder `json.dumps` builds on every call, built once: a third of the cost of a small dict.
# No circular-reference markers: attribute values are cleaned to primitives and tuples of them.
_c_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # absent from the stubs
_encode_chunks = (
    _c_encoder(None, json.JSONEncoder().default, _str, None, ": ", ", ", False, False, True)
    if _c_encoder is not None
    else None
)
_resource_cache: dict[int, tuple[Resource, str]] = {}
_cache_lock = threading.Lock()


def _resource_json(resource: Resource) -> str:
    """`json.dumps(json.loads(resource.to_json()))`, computed once per Resource object."""
    cached = _resource_cache.get(id(resource))
    if cached is not None and cached[0] is resource:
        return cached[1]
    text = json.dumps(json.loads(resource.to_json()))
    entry = (resource, text)
    with _cache_lock:
        if len(_resource_cache) > 64:  # resources are per provider: a handful per process
            _resource_cache.clear()
        _resource_cache[id(resource)] = entry
    return text


K = TypeVar("K")
V = TypeVar("V")


def _keep(cache: dict[K, V], key: K, value: V, bound: int) -> V:
    """`cache[key] = value`, emptying the cache first once it holds `bound` entries."""
    if len(cache) >= bound:
        cache.clear()
    cache[key] = value
    return value


_second_prefixes: dict[int, str] = {}


def _second_prefix(seconds: int) -> str:
    prefix = datetime.datetime.fromtimestamp(seconds, tz=_UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return _keep(_second_prefixes, seconds, prefix, 256)


def python_ns_to_iso_str(nanoseconds: int) -> str:
    """The SDK's `ns_to_iso_str`: `datetime.fromtimestamp(ns / 1e9)` splits the float into whole
    and fraction (as modf does: `seconds - int(seconds)` is exact) and rounds the fraction
    half-even to microseconds; done here with the seconds part formatted once (before 1970, as the
    SDK does it: the fraction of a negative time borrows from the second)."""
    seconds = nanoseconds / 1e9
    if seconds < 0:
        return datetime.datetime.fromtimestamp(seconds, tz=_UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    whole = int(seconds)
    micros = round((seconds - whole) * 1e6)
    if micros >= 1_000_000:
        micros -= 1_000_000
        whole += 1
    return f"{_second_prefixes.get(whole) or _second_prefix(whole)}.{micros:06d}Z"


ns_to_iso_str: Callable[[int], str] = python_ns_to_iso_str
_compiled_line: Callable[..., str | None] | None = None
if _span_json is not None and native.ENABLED:
    _span_json.bind(python_ns_to_iso_str)  # for times before 1970 or after 9999
    ns_to_iso_str = _span_json.iso
    _compiled_line = _span_json.line


# Keyed by the members' values: hashing an Enum member runs Enum.__hash__ in Python.
_KIND_JSON = {kind._value_: _str(str(kind)) for kind in SpanKind}
_STATUS_JSON = {code._value_: '{"status_code": ' + _str(code.name) for code in StatusCode}


_SEPARATOR_STRINGS = frozenset({":", ","})
# JSON of dicts of plain strings by their items: a submission span's attributes repeat for every
# call of one function from one process (an execution span's, carrying the task id, never do).
# Only all-string dicts are kept, so a hit is one: a str never equals a number or a bool, which
# would otherwise collide (1 == 1.0 == True).
_plain_string_dicts: dict[tuple[tuple[Any, Any], ...], str] = {}


def _attrs(attributes: Any) -> str:
    """`json.dumps(dict(attributes))`: keys are strings and values mostly strings."""
    if attributes is None:
        return "null"
    if not attributes:
        return "{}"
    kind = type(attributes)
    # A span's attributes come as a read-only proxy of its dict; copy() asks the dict (dict() would
    # go key by key through the mapping protocol).
    plain = (
        attributes if kind is dict else attributes.copy() if kind is MappingProxyType else dict(attributes)
    )
    if len(plain) < 4:  # below four the C encoder costs less than the checks
        return _exact_json(plain)
    items = tuple(plain.items())
    if semconv.RAY_TASK_ID in plain:
        # A task's own id makes every dict unique. It comes last in ours and Ray's: the JSON of the
        # others is kept, and the id's pair written after it as json.dumps writes a str pair.
        key, value = items[-1]
        if key == semconv.RAY_TASK_ID and type(value) is str:
            head = _kept_plain_json(items[:-1])
            if head is not None:
                return f"{head[:-1]}, {_str(key)}: {_str(value)}}}"
        return _plain_strings_json(plain) or _exact_json(plain)
    return _kept_plain_json(items) or _exact_json(plain)


def _kept_plain_json(items: tuple[tuple[Any, Any], ...]) -> str | None:
    """`_plain_strings_json(dict(items))`, kept by the items (None: not all plain strings)."""
    try:
        known = _plain_string_dicts.get(items)
    except TypeError:  # a list value: not hashable, and not a plain string either
        return None
    if known is None:
        known = _plain_strings_json(dict(items))
        if known is not None:
            _keep(_plain_string_dicts, items, known, 256)
    return known


def _exact_json(plain: dict[str, Any]) -> str:
    return "".join(_encode_chunks(plain, 0)) if _encode_chunks is not None else _dumps(plain)


def _plain_strings_json(plain: dict[str, Any]) -> str | None:
    """`json.dumps(plain)` when every value is a string and nothing needs escaping, else None.

    Then orjson's compact output with `": "` and `", "` put back is the same text at a quarter of
    the cost: nothing was escaped (so every `"` is a delimiter), no key or value is `":"` or `","`
    alone (the only strings that read as a separator), and there is one `":"` per key (every
    value is a string)."""
    try:
        compact = orjson.dumps(plain)
    except orjson.JSONEncodeError:
        return None  # the exact encoder decides
    if (
        compact.isascii()
        and b"\\" not in compact
        and b"\x7f" not in compact  # json.dumps escapes DEL, orjson does not
        and compact.count(b'":"') == len(plain)
        and _SEPARATOR_STRINGS.isdisjoint(plain)
        and _SEPARATOR_STRINGS.isdisjoint(plain.values())
    ):
        return compact.replace(b'":"', b'": "').replace(b'","', b'", "').decode()
    return None


def _trace_state_json(state: TraceState) -> str:
    return _EMPTY_TRACE_STATE if state is DEFAULT_TRACE_STATE or not state else _str(repr(state))


def _context(ctx: SpanContext) -> str:
    return (
        f'{{"trace_id": "0x{ctx.trace_id:032x}", "span_id": "0x{ctx.span_id:016x}",'
        f' "trace_state": {_trace_state_json(ctx.trace_state)}}}'
    )


_EMPTY_TRACE_STATE = _str(repr(TraceState()))
# (name, key, value) of events with one string attribute, as ours are: their JSON around the time.
_one_attribute_events: dict[tuple[str, str, str], tuple[str, str]] = {}


def _event(name: str, timestamp: int, attributes: Any) -> str:
    if type(attributes) is dict and len(attributes) == 1:
        ((key, value),) = attributes.items()
        if type(value) is str:
            around = _one_attribute_events.get((name, key, value))
            if around is None:
                around = _keep(
                    _one_attribute_events,
                    (name, key, value),
                    (
                        f'{{"name": {_str(name)}, "timestamp": "',
                        f'", "attributes": {{{_str(key)}: {_str(value)}}}}}',
                    ),
                    1024,
                )
            return f"{around[0]}{ns_to_iso_str(timestamp)}{around[1]}"
    time = ns_to_iso_str(timestamp)
    return f'{{"name": {_str(name)}, "timestamp": "{time}", "attributes": {_attrs(attributes)}}}'


def _time(nanoseconds: int | None) -> str:
    return f'"{ns_to_iso_str(nanoseconds)}"' if nanoseconds else "null"


def _plain(attributes: Any) -> Any:
    """The attributes as a dict (None stays None): a span hands them out as a read-only proxy of its
    dict, whose copy() asks the dict (dict() would go key by key through the mapping protocol)."""
    kind = type(attributes)
    if kind is dict or attributes is None:
        return attributes
    return attributes.copy() if kind is MappingProxyType else dict(attributes)


def _links_json(links: Any) -> str:
    return ", ".join(
        [
            f'{{"context": {_context(link.context)}, "attributes": {_attrs(link.attributes)}}}'
            for link in links
        ]
    )


def span_to_json_line(span: ReadableSpan) -> str:
    """Exactly `span.to_json(indent=None)`, without the trailing newline: the same keys in the same
    order, each value encoded as `json.dumps` would, the resource's JSON cached per Resource.
    Written by the compiled writer where built (the same text), else by `python_span_to_json_line`."""
    if _compiled_line is None:
        return python_span_to_json_line(span)
    return span_fields_to_json_line(
        span.name,
        span.context,
        span.kind,
        span.parent,
        span.start_time,
        span.end_time,
        span.status,
        span.attributes,
        span.events,
        span.links,
        span.resource,
    )


def span_fields_to_json_line(
    name: str,
    ctx: SpanContext | None,
    kind: SpanKind,
    parent: SpanContext | None,
    start_ns: int | None,
    end_ns: int | None,
    status: Status,
    attributes: Any,
    events: Sequence[Event],
    links: Sequence[Link],
    resource: Resource,
) -> str:
    """`span_to_json_line` of a span with these fields (what its ReadableSpan properties give, or
    a span that hands them out at once: `DirectSpan.line_fields`)."""
    status_json = _STATUS_JSON[status.status_code._value_]
    if status.description:
        status_json += ', "description": ' + _str(status.description)
    if _compiled_line is not None and ctx is not None:
        line = _compiled_line(
            name,
            ctx,
            _trace_state_json(ctx.trace_state),
            _KIND_JSON[kind._value_],
            parent,
            start_ns,
            end_ns,
            status_json,
            _plain(attributes),
            events,
            _links_json(links) if links else "",
            _resource_json(resource),
        )
        if line is not None:
            return line
    return _line(
        name,
        _context(ctx) if ctx else "null",
        _KIND_JSON[kind._value_],
        parent,
        start_ns,
        end_ns,
        status_json,
        attributes,
        ", ".join([_event(e.name, e.timestamp, e.attributes) for e in events]),
        _links_json(links),
        resource,
    )


def python_span_to_json_line(span: ReadableSpan) -> str:
    """`span_to_json_line` in Python only (the compiled writer's twin)."""
    ctx, status = span.context, span.status
    status_json = _STATUS_JSON[status.status_code._value_]
    if status.description:
        status_json += ', "description": ' + _str(status.description)
    return _line(
        span.name,
        _context(ctx) if ctx else "null",
        _KIND_JSON[span.kind._value_],
        span.parent,
        span.start_time,
        span.end_time,
        status_json,
        span.attributes,
        ", ".join([_event(e.name, e.timestamp, e.attributes) for e in span.events]),
        _links_json(span.links),
        span.resource,
    )


def _line(
    name: str,
    context_json: str,
    kind_json: str,
    parent: SpanContext | None,
    start_ns: int | None,
    end_ns: int | None,
    status_json: str,
    attributes: Any,
    events_json: str,
    links_json: str,
    resource: Resource,
) -> str:
    """A span's line from its parts, the SDK's keys in the SDK's order."""
    parent_json = "null" if parent is None else f'"0x{parent.span_id:016x}"'
    return (
        f'{{"name": {_str(name)}, "context": {context_json},'
        f' "kind": {kind_json},'
        f' "parent_id": {parent_json},'
        f' "start_time": {_time(start_ns)}, "end_time": {_time(end_ns)},'
        f' "status": {status_json}}}, "attributes": {_attrs(attributes)},'
        f' "events": [{events_json}], "links": [{links_json}], "resource": {_resource_json(resource)}}}'
    )


_PRODUCER_KIND_JSON = _KIND_JSON[SpanKind.PRODUCER._value_]
_UNSET_STATUS_JSON = _STATUS_JSON[StatusCode.UNSET._value_]


def plain_span_json_line(
    name: str,
    ctx: SpanContext,
    parent: SpanContext | None,
    start_ns: int,
    end_ns: int,
    attributes: Any,
    resource: Resource,
) -> str:
    """`span_to_json_line` of an ended PRODUCER span with these fields, UNSET status and no events
    or links (a submission span), written from the fields without making the span."""
    if _compiled_line is not None:
        line = _compiled_line(
            name,
            ctx,
            _trace_state_json(ctx.trace_state),
            _PRODUCER_KIND_JSON,
            parent,
            start_ns,
            end_ns,
            _UNSET_STATUS_JSON,
            _plain(attributes),
            (),
            "",
            _resource_json(resource),
        )
        if line is not None:
            return line
    return _line(
        name,
        _context(ctx),
        _PRODUCER_KIND_JSON,
        parent,
        start_ns,
        end_ns,
        _UNSET_STATUS_JSON,
        attributes,
        "",
        "",
        resource,
    )


class _BytesEncoder(json.JSONEncoder):
    """The SDK's log JSON encoder: bytes as base64."""

    def default(self, o: Any) -> Any:
        if isinstance(o, bytes):
            return base64.b64encode(o).decode()
        return super().default(o)


def log_record_to_json_line(record: Any) -> str:
    """Exactly `ReadableLogRecord.to_json(indent=None)` for a Readable or ReadWrite log record."""
    log = record.log_record
    head = json.dumps(
        {
            "body": log.body,
            "severity_number": log.severity_number.value if log.severity_number is not None else None,
            "severity_text": log.severity_text,
            "attributes": dict(log.attributes) if log.attributes else None,
            "dropped_attributes": record.dropped_attributes,
            "timestamp": ns_to_iso_str(log.timestamp) if log.timestamp is not None else None,
            "observed_timestamp": ns_to_iso_str(log.observed_timestamp),
            "trace_id": f"0x{format_trace_id(log.trace_id)}" if log.trace_id is not None else "",
            "span_id": f"0x{format_span_id(log.span_id)}" if log.span_id is not None else "",
            "trace_flags": log.trace_flags,
        },
        cls=_BytesEncoder,
    )
    tail = json.dumps({"event_name": log.event_name if log.event_name else ""})
    return f'{head[:-1]}, "resource": {_resource_json(record.resource)}, {tail[1:]}'
