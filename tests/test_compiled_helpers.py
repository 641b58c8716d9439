"""The compiled helpers against the Python code they copy: the log-record walk (otel/_record_walk.c),
OTLP values read from wire bytes (otel/_any_value_wire.c) and the RayEvent JSON reader
(encoding/_ray_json_wire.c)."""

from __future__ import annotations

import copy
import random
import shlex
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.encoding import ray_json_decode
from ray_otel_events.otel import log_records, plain_records
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.test_otlp_wire import _fixture_dicts, values

try:
    from ray_otel_events.otel import _record_walk
except ImportError:
    _record_walk = None  # type: ignore[assignment]
try:
    from ray_otel_events.encoding import _ray_json_wire
except ImportError:
    _ray_json_wire = None  # type: ignore[assignment]
try:
    from ray_otel_events.otel import _any_value_wire
except ImportError:
    _any_value_wire = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(
    _record_walk is None or _ray_json_wire is None or _any_value_wire is None,
    reason="built without a C compiler",
)


def _compiler() -> str | None:
    command = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return shutil.which(command[0]) if command else None


def test_the_helpers_are_compiled_where_a_c_compiler_is_present() -> None:
    if _compiler() is None:
        assert log_records._walk is log_records._walk_python
        assert ray_json_decode._event_wire is None
        assert not plain_records._compiled
        return
    assert _record_walk is not None, "setup.py should have built otel/_record_walk.c"
    assert _ray_json_wire is not None, "setup.py should have built encoding/_ray_json_wire.c"
    assert log_records._walk is _record_walk.walk
    assert ray_json_decode._event_wire is _ray_json_wire.event_wire
    assert _any_value_wire is not None, "setup.py should have built otel/_any_value_wire.c"
    assert plain_records._compiled


def _plans() -> tuple[log_records._Plan, log_records._Plan]:
    """Fresh plans for each walk, so that each fills its own caches (first use and repeats)."""
    return (
        log_records._Plan("ray.event", RayEvent.DESCRIPTOR),
        log_records._Plan("ray.event", RayEvent.DESCRIPTOR),
    )


def _both(obj: Any, plans: tuple[log_records._Plan, log_records._Plan]) -> list[Any]:
    """What each walk returns and appends, or the error it raises."""
    assert _record_walk is not None
    results: list[Any] = []
    for walk, plan in ((_record_walk.walk, plans[0]), (log_records._walk_python, plans[1])):
        attrs: list[bytes] = []
        try:
            results.append((walk(obj, plan, attrs), attrs))
        except (TypeError, ValueError, UnicodeError) as error:
            results.append(type(error))
    return results


@needs_compiled
def test_every_real_event_walks_to_the_same_bytes_first_time_and_again() -> None:
    plans = _plans()
    dicts = _fixture_dicts()
    assert len(dicts) > 150
    for obj in dicts + dicts:
        compiled, python = _both(obj, plans)
        assert compiled == python


@needs_compiled
def test_a_field_whose_values_never_repeat_stays_exact_past_its_cache() -> None:
    plans = _plans()
    for i in range(log_records._LEAF_VALUES_MAX + 50):
        obj = {"eventId": f"id-{i}", "taskDefinitionEvent": {"taskAttempt": i, "taskName": "f"}}
        compiled, python = _both(obj, plans)
        assert compiled == python


_NAMES = [
    "eventId",
    "taskDefinitionEvent",
    "taskLifecycleEvent",
    "stateTransitions",
    "taskId",
    "requiredResources",
    "rayErrorInfo",
    "labels",
    "k",
    "",
]
_scalars = (
    st.text(max_size=6)
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.none()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_NAMES), inner, max_size=4),
    max_leaves=16,
)


@needs_compiled
@settings(max_examples=400)
@given(st.dictionaries(st.sampled_from(_NAMES) | st.text(max_size=4), _values, max_size=5))
def test_any_json_shape_walks_to_the_same_bytes_or_the_same_error(obj: dict[str, Any]) -> None:
    """Schema fields and unknown keys, maps, nested lists, floats, None, ints past 64 bits."""
    plans = _plans()
    compiled, python = _both(obj, plans)
    assert compiled == python
    assert _both(obj, plans) == [compiled, python]  # again, from the caches


def test_the_environment_can_turn_the_compiled_helpers_off() -> None:
    code = (
        "from ray_otel_events.otel import log_records as r\n"
        "from ray_otel_events.encoding import ray_json_decode as d\n"
        "from ray_otel_events.otel import plain_records as p\n"
        "print(r._walk is r._walk_python and d._event_wire is None and not p._compiled)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"RAY_OTEL_EVENTS_PURE_PYTHON": "1", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"


# -- the RayEvent JSON reader ---------------------------------------------------------------------


def _read_both(obj: Any) -> tuple[RayEvent | None, RayEvent | None]:
    """(compiled, Python fast path): the event each reads, or None where it hands over."""
    assert _ray_json_wire is not None
    wire = _ray_json_wire.event_wire(obj, ray_json_decode._EVENT_SCHEMA)
    compiled = None if wire is None else RayEvent.FromString(wire)
    python: RayEvent | None = RayEvent()
    try:
        ray_json_decode._fill(python, obj)
    except (ray_json_decode._Fallback, ValueError, TypeError, OverflowError):
        python = None
    return compiled, python


def _same(obj: Any) -> bool:
    """Whether both read `obj` (to the same message); failing where one reads and one hands over."""
    compiled, python = _read_both(obj)
    if compiled is None or python is None:
        assert compiled is None and python is None, obj
        return False
    assert compiled == python, obj
    assert compiled.SerializeToString(deterministic=True) == python.SerializeToString(deterministic=True)
    return True


@needs_compiled
def test_every_real_event_reads_to_the_same_message() -> None:
    assert all(_same(obj) for obj in _fixture_dicts())


_ODD_VALUES: list[Any] = [
    None, "x", "", 0, -1, 1.5, True, [], {}, ["x"], [1], {"a": 1}, 2**63, 2**64 - 1, -(2**63) - 1, 2**70,
    "-0", "007", "+1", " 1", "1e5", "\u0663", "\ud800", "é", 1e300, "AAAA", "QR==", "QQ", "////",
    "2024-02-29T23:59:59.5Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "1970-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z", "2020-01-01T00:00:00.1234567890Z", "2020-01-01T00:00:00+01:00",
    "FINISHED", "TASK_DEFINITION_EVENT", 99,
]  # fmt: skip


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in items:
        found.append((*path, key))
        found.extend(_paths(value, (*path, key)))
    return found


@needs_compiled
def test_mutated_events_read_the_same_or_are_handed_to_python_by_both() -> None:
    """Odd values anywhere; keys renamed (proto names, unknown, one field twice) or removed."""
    rnd = random.Random(20261123)
    dicts = _fixture_dicts()
    read = 0
    for _ in range(3000):
        obj = copy.deepcopy(rnd.choice(dicts))
        for _ in range(rnd.randint(1, 3)):
            path = rnd.choice(_paths(obj))
            parent: Any = obj
            for key in path[:-1]:
                parent = parent[key]
            roll = rnd.random()
            if roll < 0.7:
                parent[path[-1]] = copy.deepcopy(rnd.choice(_ODD_VALUES))
            elif isinstance(parent, dict):
                value = parent.pop(path[-1])
                if roll < 0.85:
                    parent[rnd.choice(["task_id", "taskId", "timestamp", "node_id", "nodeId", "x"])] = value
        read += _same(obj)
    assert read > 300  # enough of them still read, not only handed over


@needs_compiled
@settings(max_examples=300)
@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=13),
    st.integers(min_value=0, max_value=32),
    st.integers(min_value=0, max_value=60),
    st.text(alphabet="0123456789", max_size=10),
    st.integers(min_value=-(2**65), max_value=2**65) | st.text(alphabet="-0123456789", max_size=22),
)
def test_timestamps_and_integers_read_the_same(
    year: int, month: int, day: int, second: int, fraction: str, number: int | str
) -> None:
    stamp = (
        f"{year:04d}-{month:02d}-{day:02d}T23:59:{second:02d}" + (f".{fraction}" if fraction else "") + "Z"
    )
    _same({"timestamp": stamp, "taskDefinitionEvent": {"taskAttempt": number}})
    _same({"timestamp": stamp, "taskLifecycleEvent": {"stateTransitions": [{"timestamp": stamp}]}})


# -- OTLP values from wire bytes --------------------------------------------------------------------

_UNKNOWN_FIELD = b"\x78\x05"  # field 15, a varint: neither AnyValue nor KeyValue has it


@needs_compiled
@settings(max_examples=300)
@given(values, values)
def test_values_read_from_wire_bytes_are_what_upb_gives(first: Any, second: Any) -> None:
    """One value, and two serialized back to back (protobuf merges them: the last scalar, messages
    merged, another oneof member replacing), with a field neither side knows."""
    assert _any_value_wire is not None
    one = plain_records.python_to_any_value(first).SerializeToString()
    two = one + _UNKNOWN_FIELD + plain_records.python_to_any_value(second).SerializeToString()
    for data in (one, two):
        expected = plain_records.any_value_to_python(AnyValue.FromString(data))
        assert _any_value_wire.any_value(data) == expected
        assert plain_records.value_of(AnyValue.FromString(data)) == expected


@needs_compiled
@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "é", ""]), values), max_size=6))
def test_attributes_read_from_wire_bytes_are_what_upb_gives(pairs: list[tuple[str, Any]]) -> None:
    """Repeated keys (the last wins), unset values, events' and the span's own lists apart."""
    span = Span(name="s", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key, value in pairs:
        entry = span.attributes.add(key=key)
        if value is not None:
            plain_records.python_to_any_value(value, entry.value)
        span.events.add(name="e").attributes.add(key=key).value.string_value = "v"
    assert plain_records.attributes_of(span) == plain_records.attributes_to_dict(span.attributes)
    for event in span.events:
        assert plain_records.attributes_of(event) == plain_records.attributes_to_dict(event.attributes)


def _python_span_parts(span: Span) -> plain_records.SpanParts:
    """The Python reading of `span_parts`, whichever is bound."""
    compiled = plain_records._compiled
    plain_records._compiled = False
    try:
        return plain_records.span_parts(span)
    finally:
        plain_records._compiled = compiled


_attribute_lists = st.lists(st.tuples(st.sampled_from(["a", "b", "é", ""]), values), max_size=4)


@needs_compiled
@settings(max_examples=200)
@given(
    st.binary(max_size=16),
    st.text(max_size=5),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.integers(min_value=0, max_value=2**64 - 1),
    _attribute_lists,
    st.lists(
        st.tuples(st.text(max_size=3), st.integers(min_value=0, max_value=2**64 - 1), _attribute_lists),
        max_size=3,
    ),
    st.lists(st.tuples(st.binary(max_size=16), st.text(max_size=3), _attribute_lists), max_size=2),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_span_parts_read_from_wire_bytes_are_what_upb_gives(
    ids: bytes,
    text: str,
    kind: int,
    time: int,
    attributes: list[tuple[str, Any]],
    events: list[tuple[str, int, list[tuple[str, Any]]]],
    links: list[tuple[bytes, str, list[tuple[str, Any]]]],
    code: int,
) -> None:
    """Every field a plain record shows, out-of-range enums, empty and unset parts alike."""

    def fill(target: Any, pairs: list[tuple[str, Any]]) -> None:
        for key, value in pairs:
            entry = target.add(key=key)
            if value is not None:
                plain_records.python_to_any_value(value, entry.value)

    span = Span(trace_id=ids, span_id=ids[:8], parent_span_id=ids[8:], trace_state=text, name=text * 2)
    span.kind = kind  # type: ignore[assignment]
    span.start_time_unix_nano, span.end_time_unix_nano = time, time // 2
    fill(span.attributes, attributes)
    for name, at, pairs in events:
        fill(span.events.add(name=name, time_unix_nano=at).attributes, pairs)
    for trace, state, pairs in links:
        fill(span.links.add(trace_id=trace, span_id=trace[:8], trace_state=state).attributes, pairs)
    if code or text:
        span.status.code = code  # type: ignore[assignment]
        span.status.message = text
    parts = plain_records.span_parts(span)
    assert parts == _python_span_parts(span)
    context = plain_records.RecordContext(Resource(), InstrumentationScope(name="s"))
    assert plain_records.span_record(parts, context) == plain_records.span_record(
        _python_span_parts(span), context
    )
