"""The compiled helpers against the Python code they copy: the log-record walk (native/_record_walk.c),
span lines' ISO times (native/_span_json.c),
OTLP values read from wire bytes (native/_any_value_wire.c), spans' JSON records written from theirs
(native/_span_records.c), OTLP records and requests written from their parts (native/_otlp_wire.c), the
RayEvent JSON writer (native/_ray_json_encode.c) and reader
(native/_ray_json_wire.c) and the store's fold (native/_state_fold.c)."""

from __future__ import annotations

import base64
import binascii
import copy
import random
import shlex
import shutil
import sqlite3
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span

from ray_otel_events.encoding import ray_json, ray_json_decode
from ray_otel_events.otel import (
    event_heads,
    from_ray_events,
    log_records,
    otlp_wire,
    plain_records,
    posted_events,
    span_json,
)
from ray_otel_events.protobuf.events_actor_lifecycle_event_pb2 import ActorLifecycleEvent
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent
from ray_otel_events.store import kept_ids, row_fold, sqlite_store, state_merge
from ray_otel_events.store.row_packing import (
    PACKED_V1,
    PACKED_V2,
    ROW_DICTIONARY,
    id_value,
    pack_row,
    row_json,
)
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.tracing import spool
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled as needs_compiled_twins
from tests.helpers.pure_python import run_pure_python
from tests.helpers.stored_rows import SELECT_ROWS, unpacked
from tests.test_otlp_wire import _fixture_dicts, values
from tests.test_ray_json import ray_events

try:
    from ray_otel_events.native import _record_walk
except ImportError:
    _record_walk = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _ray_json_wire
except ImportError:
    _ray_json_wire = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _any_value_wire
except ImportError:
    _any_value_wire = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _ray_json_encode
except ImportError:
    _ray_json_encode = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _span_records
except ImportError:
    _span_records = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _otlp_wire
except ImportError:
    _otlp_wire = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _entity_spans
except ImportError:
    _entity_spans = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _event_head
except ImportError:
    _event_head = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _span_json
except ImportError:
    _span_json = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _spool_line
except ImportError:
    _spool_line = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _state_fold
except ImportError:
    _state_fold = None  # type: ignore[assignment]
try:
    from ray_otel_events.native import _row_writer
except ImportError:
    _row_writer = None  # type: ignore[assignment]

needs_compiled = needs_compiled_twins(
    all(
        m is not None
        for m in (
            _record_walk,
            _ray_json_wire,
            _ray_json_encode,
            _any_value_wire,
            _span_records,
            _otlp_wire,
            _entity_spans,
            _event_head,
            _span_json,
            _state_fold,
        )
    ),
    "the compiled helpers",
)
needs_row_writer = needs_compiled_twins(_row_writer is not None, "the row writer (SQLite's headers)")
# The converter core's readers take Ray's field numbers from bind(), which from_ray_events calls only
# with the compiled helpers on.
needs_bound_core = needs_compiled_twins(from_ray_events._compiled, "the compiled core, bound")


def _compiler() -> str | None:
    command = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return shutil.which(command[0]) if command else None


@needs_compiled_twins(True, "which twin runs where a C compiler is present")
def test_the_helpers_are_compiled_where_a_c_compiler_is_present() -> None:
    if _compiler() is None:
        assert log_records._walk is log_records._walk_python
        assert ray_json_decode._event_wire is None
        assert not plain_records._compiled and not plain_records._records_compiled
        assert not ray_json.writes_compiled()
        assert not otlp_wire._compiled
        assert from_ray_events._read_transitions is None
        assert not from_ray_events.RayEventsToOtel().compiled
        assert not event_heads._compiled
        assert span_json.ns_to_iso_str is span_json.python_ns_to_iso_str
        assert state_merge.prepare is state_merge._prepare_python
        assert spool.compiled_span_line is spool._python_writes
        return
    assert _record_walk is not None, "setup.py should have built native/_record_walk.c"
    assert _ray_json_wire is not None, "setup.py should have built native/_ray_json_wire.c"
    assert log_records._walk is _record_walk.walk
    assert ray_json_decode._event_wire is _ray_json_wire.event_wire
    assert _any_value_wire is not None, "setup.py should have built native/_any_value_wire.c"
    assert plain_records._compiled
    assert _span_json is not None, "setup.py should have built native/_span_json.c"
    assert span_json.ns_to_iso_str is _span_json.iso
    assert _span_records is not None, "setup.py should have built native/_span_records.c"
    assert plain_records._records_compiled
    assert _otlp_wire is not None, "setup.py should have built native/_otlp_wire.c"
    assert otlp_wire._compiled
    assert _entity_spans is not None, "setup.py should have built native/_entity_spans.c"
    assert from_ray_events._read_transitions is _entity_spans.transitions
    assert from_ray_events.RayEventsToOtel().compiled
    assert _event_head is not None, "setup.py should have built native/_event_head.c"
    assert event_heads._compiled
    assert _ray_json_encode is not None, "setup.py should have built native/_ray_json_encode.c"
    assert ray_json.writes_compiled()
    assert _state_fold is not None, "setup.py should have built native/_state_fold.c"
    assert state_merge.prepare is _state_fold.prepare
    assert state_merge.row_columns is _state_fold.row_columns
    assert row_fold.fold_rows is _state_fold.fold_rows
    assert _spool_line is not None, "setup.py should have built native/_spool_line.c"
    assert spool.compiled_span_line is _spool_line.span_line
    assert spool.compiled_submission_line is _spool_line.submission_line


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
@settings(max_examples=examples(400))
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
        "from ray_otel_events.store import state_merge as s\n"
        "import pathlib, tempfile\n"
        "from ray_otel_events.store.sqlite_store import EventStore\n"
        "store = EventStore(pathlib.Path(tempfile.mkdtemp()) / 'store.sqlite3')\n"
        "print(r._walk is r._walk_python and d._event_wire is None and not p._compiled"
        " and not p._records_compiled"
        " and not __import__('ray_otel_events.otel.otlp_wire').otel.otlp_wire._compiled"
        " and __import__('ray_otel_events.otel.from_ray_events').otel.from_ray_events"
        "._read_transitions is None"
        " and not __import__('ray_otel_events.otel.event_heads').otel.event_heads._compiled"
        " and not __import__('ray_otel_events.encoding.ray_json').encoding.ray_json.writes_compiled()"
        " and s.prepare is s._prepare_python and s.row_columns is s._row_columns_python"
        " and __import__('ray_otel_events.store.row_fold').store.row_fold.fold_rows"
        " is __import__('ray_otel_events.store.row_fold').store.row_fold._fold_rows_python"
        " and store._writer is None)"
    )
    assert run_pure_python(code) == "True"


# -- OTLP records and requests written from their parts ----------------------------------------------


def _record_python(*args: Any) -> bytes:
    names = "time_unix_nano observed_time_unix_nano severity_number severity_text body attributes"
    fields = dict(zip((*names.split(), "trace_id", "span_id", "flags", "event_name"), args, strict=True))
    fields["body"] = None if fields["body"] is None else otlp_wire.kvlist_value(fields["body"])
    fields["attributes"] = b"".join(fields["attributes"])
    return otlp_wire.log_record_from_parts(**fields)


_u64 = st.integers(min_value=0, max_value=2**64 - 1)


@needs_compiled
@settings(max_examples=examples(300))
@given(
    st.tuples(
        _u64,
        _u64,
        st.integers(min_value=0, max_value=2**32),
        st.text(max_size=8),
        st.none() | st.binary(max_size=300),
        st.lists(st.binary(max_size=40), max_size=5),
        st.binary(max_size=16),
        st.binary(max_size=8),
        st.integers(min_value=0, max_value=2**32 - 1),
        st.text(max_size=30),
    )
)
def test_a_log_record_is_written_as_python_writes_it(args: tuple[Any, ...]) -> None:
    assert _otlp_wire is not None
    assert _otlp_wire.log_record(*args) == _record_python(*args)


@needs_compiled
def test_a_log_record_with_bad_parts_raises() -> None:
    assert _otlp_wire is not None
    good = [1, 2, 9, "INFO", b"", [b"\x32\x00"], b"t" * 16, b"s" * 8, 0, "ray.event"]
    for index, bad in ((0, -1), (0, 2**64), (3, 3), (4, "body"), (5, (b"",)), (5, ["x"]), (9, None)):
        args = list(good)
        args[index] = bad
        with pytest.raises((TypeError, OverflowError)):
            _otlp_wire.log_record(*args)


_plain = (
    st.text(max_size=6)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.none()
)


@needs_compiled
@settings(max_examples=examples(300))
@given(
    st.dictionaries(
        st.text(max_size=8), _plain | st.lists(st.text(max_size=3), max_size=2) | st.binary(max_size=3)
    ),
    st.sampled_from([b"\x32", b"\x4a", b"\x1a"]),
)
def test_attributes_are_written_as_python_writes_them(values: dict[str, Any], tag: bytes) -> None:
    assert _otlp_wire is not None
    otlp_wire._compiled = False
    try:
        python = otlp_wire.attributes(values, tag)
    finally:
        otlp_wire._compiled = True
    written = _otlp_wire.attributes(values, tag)
    if all(type(v) in (str, bool, int, float, type(None)) for v in values.values()):
        assert written == python
    else:
        assert written is None
    assert otlp_wire.attributes(values, tag) == python


_seconds = st.sampled_from([0, 1, -1, 1_795_311_449, 18_446_744_073, 18_446_744_074, 253402300799])
_transition = st.tuples(
    st.integers(min_value=-(2**31), max_value=2**31 - 1) | st.sampled_from([0, 1, 2, 9, 11]),
    _seconds | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 5, 999_999_999]) | st.integers(min_value=-(2**31), max_value=2**31 - 1),
)


def _transitions_python(wire: bytes, kind: str) -> Any:
    """from_ray_events._transitions through upb, without the transition messages; None where it
    raises."""
    cls = TaskLifecycleEvent if kind == "task" else ActorLifecycleEvent
    entity = from_ray_events._Entity((kind, "s", b"id", 0), 0, 0, 0.0, lifecycle_wire=wire)
    entity.lifecycle = cls.FromString(wire)
    saved, from_ray_events._read_transitions = from_ray_events._read_transitions, None
    try:
        return [(ns, state) for ns, state, _ in from_ray_events.RayEventsToOtel._transitions(entity)]
    except ValueError:
        return None
    finally:
        from_ray_events._read_transitions = saved


@needs_compiled
@needs_bound_core
@settings(max_examples=examples(400))
@given(st.lists(st.lists(_transition, max_size=6), min_size=1, max_size=3), st.booleans())
def test_transitions_read_from_wire_bytes_are_what_upb_gives(
    pieces: list[list[tuple[int, int, int]]], task: bool
) -> None:
    """Several pieces concatenated (how an open entity keeps them), repeats, any order, times out
    of range and past what OTLP carries."""
    assert _entity_spans is not None
    cls = TaskLifecycleEvent if task else ActorLifecycleEvent
    wire = b""
    for piece in pieces:
        message = cls()
        for state, seconds, nanos in piece:
            transition = message.state_transitions.add(state=state % 5 if not task else state)
            transition.timestamp.seconds, transition.timestamp.nanos = seconds, nanos
        wire += message.SerializeToString()
    read = _entity_spans.transitions(wire, "task" if task else "actor")
    python = _transitions_python(wire, "task" if task else "job")  # "job": actors' spans read upb's
    assert (None if read is None else [(ns, state) for ns, state, _ in read]) == python


# -- a RayEvent's head --------------------------------------------------------------------------


def _python_head(event: RayEvent) -> event_heads.EventHead | None:
    try:
        return event_heads.python_head(event)
    except ValueError:  # a timestamp out of range
        return None


@needs_compiled
def test_every_real_event_head_is_read_as_upb_reads_it() -> None:
    assert _event_head is not None
    events = [ray_json_decode.decode_event(obj) for obj in _fixture_dicts()]
    assert len(events) > 100
    for event in events:
        head = _event_head.head(event.SerializeToString())
        assert head is not None and type(head) is event_heads.EventHead
        assert head == event_heads.python_head(event)
    # the converter's read of wire bytes: the same heads, an unknown type's (left by C) read by upb
    odd = RayEvent(event_type=63, session_name="s")
    assert _event_head.head(odd.SerializeToString()) is None
    heads = [event_heads.wire_head(e.SerializeToString()) for e in [*events, odd]]
    assert heads == [event_heads.python_head(e) for e in [*events, odd]]


@needs_compiled
@settings(max_examples=examples(200), deadline=None)  # fuzz/fuzz_event_head.py fuzzes the same reader
@given(ray_events())
def test_random_event_heads_are_read_as_upb_reads_them(event: RayEvent) -> None:
    """Every payload type with random fields, ids of any length, negative attempts, unknown enum
    numbers: the same head, or None only where Python's reading raises or the type is unknown."""
    assert _event_head is not None
    head = _event_head.head(event.SerializeToString())
    python = _python_head(event)
    if head is None:
        assert python is None or event.event_type not in event_heads._SPECS
    else:
        assert head == python


@needs_compiled
def test_odd_event_heads_are_left_to_python() -> None:
    """A payload given twice (upb merges it), a known field of another wire type, malformed bytes,
    a time out of range, an unknown type."""
    assert _event_head is not None
    event = RayEvent(event_id=b"e", session_name="s", event_type=RayEvent.TASK_LIFECYCLE_EVENT)
    event.task_lifecycle_event.task_id = b"t" * 24
    wire = event.SerializeToString()
    payload = event.task_lifecycle_event.SerializeToString()
    assert _event_head.head(wire) == event_heads.python_head(event)
    twice = wire + b"\x4a" + bytes([len(payload)]) + payload  # field 9 again
    wrong_type = wire + b"\x38\x01"  # session_name (7) as a varint
    late = RayEvent()
    late.CopyFrom(event)
    late.timestamp.seconds = 253402300800
    unknown = RayEvent(event_type=63)
    for odd in (twice, wrong_type, wire[:-1], late.SerializeToString(), unknown.SerializeToString()):
        assert _event_head.head(odd) is None


# RayEvents upb refuses for something inside a field the head does not read.
REFUSED_INSIDE = {
    "text not UTF-8 in a field the head skips": bytes.fromhex("18063a01733201b86a030a016a"),
    "a group left open inside a transition": bytes.fromhex("18063a01736a080a016a120312010b"),
    "a value cut short inside a transition": bytes.fromhex("18063a012d6a080a016a120312012d"),
}


@needs_compiled
@pytest.mark.parametrize("wire", REFUSED_INSIDE.values(), ids=REFUSED_INSIDE.keys())
def test_bytes_that_did_not_come_through_upb_are_refused_as_upb_refuses_them(wire: bytes) -> None:
    """Forwarded pieces and queued rows reach the head reader without upb: they are refused as the
    Python path refuses them, not given a head."""
    assert _event_head is not None
    with pytest.raises(DecodeError):
        RayEvent.FromString(wire)
    assert _event_head.checked_head(wire) is None
    with pytest.raises(DecodeError):
        posted_events.wire_parts(wire)
    piece = len(wire).to_bytes(4, "big") + wire + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"
    with pytest.raises(ValueError, match="not a RayEvent"):
        posted_events.decode_pieces(piece)


@needs_compiled
def test_checked_heads_are_the_heads_of_what_upb_reads() -> None:
    """Every real event, and ones with UTF-8 text, packed values and unknown fields: the same head
    either way (the check hands nothing back that upb reads)."""
    assert _event_head is not None
    events = [ray_json_decode.decode_event(obj) for obj in _fixture_dicts()]
    for event in events:
        wire = event.SerializeToString()
        assert _event_head.checked_head(wire) == _event_head.head(wire) is not None
    event = events[0]
    event.message = "é 日本 \U0001f600"
    wire = event.SerializeToString() + b"\xf8\x07\x01" + b"\xfa\x07\x02\xff\xfe"  # unknown 127
    assert _event_head.checked_head(wire) == _event_head.head(wire) is not None
    message = RayEvent.DESCRIPTOR.fields_by_name["message"].number
    for text in (
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe6\x97",
        b"\xef\xbf\xbf",
        b"\xf4\x8f\xbf\xbf",
    ):
        odd = event.SerializeToString() + bytes([message << 3 | 2, len(text)]) + text
        try:
            RayEvent.FromString(odd)
        except DecodeError:
            assert _event_head.checked_head(odd) is None, text
        else:
            assert _event_head.checked_head(odd) == _event_head.head(odd) is not None, text


# Definitions (field 3: task_type, 5: task_func, 6: task_name) upb copies otherwise than as written.
ODD_DEFINITIONS = {
    "an empty string": bytes.fromhex("3200"),
    "an enum of 0": bytes.fromhex("1800") + bytes.fromhex("320161"),
    "an enum past int32": bytes.fromhex("18ffffffff0f"),
    "a kept number of another wire type": bytes.fromhex("2803") + bytes.fromhex("3501020304"),
    "a field given twice": bytes.fromhex("320161320162"),
    "fields out of order": bytes.fromhex("3201611801"),
    "a length longer than it needs": bytes.fromhex("328100") + b"a",
    "a key longer than it needs": bytes.fromhex("b2000161"),
    "a function's unknown field": bytes.fromhex("2a0812030a0161f80101"),
    "a function's names out of order": bytes.fromhex("2a0812061a01620a0161"),
    "a function's member twice": bytes.fromhex("2a0a12030a016112030a0162"),
    "a function's hash and more": bytes.fromhex("2a0e120c0a01611a016222016832016a"),
}


@needs_compiled
@pytest.mark.parametrize("wire", ODD_DEFINITIONS.values(), ids=ODD_DEFINITIONS.keys())
def test_odd_definitions_are_kept_slim_as_python_keeps_them(wire: bytes) -> None:
    """Fields written with their default value or another wire type are left out as upb leaves
    them; what upb would write otherwise is handed to Python: the same bytes either way."""
    cls = from_ray_events.TaskDefinitionEvent
    fields = from_ray_events._TASK_SPAN_FIELDS[cls]
    compiled = event_heads.kept_fields(wire, cls, fields)
    saved, event_heads._compiled = event_heads._compiled, False
    try:
        assert compiled == event_heads.kept_fields(wire, cls, fields)
    finally:
        event_heads._compiled = saved


@needs_compiled
@settings(max_examples=examples(150), deadline=None)  # fuzz/fuzz_event_head.py fuzzes `slim` too
@given(ray_events())
def test_definitions_are_kept_slim_as_python_keeps_them(event: RayEvent) -> None:
    """What an open task keeps of its definition: the same bytes either way."""
    for name, cls in (
        ("task_definition_event", from_ray_events.TaskDefinitionEvent),
        ("actor_task_definition_event", from_ray_events.ActorTaskDefinitionEvent),
    ):
        wire = getattr(event, name).SerializeToString()
        fields = from_ray_events._TASK_SPAN_FIELDS[cls]
        compiled = event_heads.kept_fields(wire, cls, fields)
        saved, event_heads._compiled = event_heads._compiled, False
        try:
            assert compiled == event_heads.kept_fields(wire, cls, fields)
        finally:
            event_heads._compiled = saved


def _parts_both_ways(
    definition: bytes | None, cls: Any, lifecycle: bytes
) -> tuple[from_ray_events._TaskParts | None, from_ray_events._TaskParts | None]:
    """(compiled, through upb) of one task's kept pieces; None where either hands over or raises."""
    assert _entity_spans is not None
    actor_task = cls is from_ray_events.ActorTaskDefinitionEvent
    read = _entity_spans.task_parts(definition, actor_task, lifecycle)
    try:
        python = from_ray_events._task_parts_python(definition, actor_task, lifecycle)
    except Exception:  # upb refuses the bytes: the compiled reader must hand over too
        python = None
    assert read is None or type(read) is from_ray_events._TaskParts
    return read, python


@needs_compiled
@needs_bound_core
@settings(max_examples=examples(200), deadline=None)  # fuzz/fuzz_entity_spans.py: the same comparison
@given(ray_events(), ray_events(), st.booleans())
def test_a_tasks_parts_are_read_as_upb_reads_them(first: RayEvent, second: RayEvent, actor: bool) -> None:
    """A definition (either kind, kept slim or whole) and two lifecycle pieces merged, random fields:
    the same parts, or the compiled reader hands over."""
    cls = from_ray_events.ActorTaskDefinitionEvent if actor else from_ray_events.TaskDefinitionEvent
    payload = first.actor_task_definition_event if actor else first.task_definition_event
    lifecycle = (
        first.task_lifecycle_event.SerializeToString() + second.task_lifecycle_event.SerializeToString()
    )
    slim = event_heads.kept_fields(payload.SerializeToString(), cls, from_ray_events._TASK_SPAN_FIELDS[cls])
    for definition in (payload.SerializeToString(), slim, None):
        read, python = _parts_both_ways(definition, cls, lifecycle)
        if read is not None:
            assert read == python


@needs_compiled
@needs_bound_core
def test_a_tasks_odd_parts_are_left_to_upb() -> None:
    """Two function descriptors (upb merges them), a field of another wire type, malformed bytes."""
    cls = from_ray_events.TaskDefinitionEvent
    definition = cls(task_name="f", job_id=b"j")
    definition.task_func.python_function_descriptor.function_name = "f"
    wire = definition.SerializeToString()
    func = definition.task_func.SerializeToString()
    read, python = _parts_both_ways(wire, cls, b"")
    assert read is not None and read == python and read.function == "f"
    for odd in (wire + b"\x2a" + bytes([len(func)]) + func, wire + b"\x30\x01", wire[:-1]):
        assert _parts_both_ways(odd, cls, b"")[0] is None
    assert _parts_both_ways(wire, cls, b"\x2a\x01")[0] is None  # node id (5) as a varint


def _envelope(resource: bytes, scope: bytes, item: bytes) -> bytes:
    return otlp_wire.resource_logs(resource, scope, [item])


@needs_compiled
@settings(max_examples=examples(300))
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"", b"\x0a\x03r-1", b"\x0a\x03r-2" + b"x" * 200]),
            st.sampled_from([b"", b"\x0a\x01s", b"\x0a\x02s2"]),
            st.binary(max_size=300),
        ),
        max_size=30,
    )
)
def test_one_item_envelopes_merge_as_python_merges_them(parts: list[tuple[bytes, bytes, bytes]]) -> None:
    assert _otlp_wire is not None
    items = [_envelope(*part) for part in parts]
    merged = _otlp_wire.merge(items)
    assert merged is not None
    otlp_wire._compiled = False
    try:
        assert merged == otlp_wire.merge_envelopes(items)
    finally:
        otlp_wire._compiled = True


@needs_compiled
def test_other_envelopes_are_left_to_python() -> None:
    assert _otlp_wire is not None
    one = _envelope(b"\x0a\x01r", b"\x0a\x01s", b"\x62\x01a")
    two = otlp_wire.resource_logs(b"\x0a\x01r", b"\x0a\x01s", [b"\x62\x01b", b"\x62\x01c"])
    many_scopes = [_envelope(b"", b"\x0a\x02" + i.to_bytes(2, "big"), b"") for i in range(65)]
    for items in ([one, two], [one, one[:-1]], [one, "text"], many_scopes, [one + b"\x00"]):
        assert _otlp_wire.merge(items) is None  # type: ignore[arg-type]
    merged_scopes = ExportLogsServiceRequest.FromString(otlp_wire.merge_envelopes(many_scopes))
    assert len(merged_scopes.resource_logs[0].scope_logs) == 65
    merged = otlp_wire.merge_envelopes([one, two])
    assert merged.count(b"\x62\x01") == 3


# -- the RayEvent JSON writer ---------------------------------------------------------------------


def _written_both_ways(wire: bytes, preserve: bool) -> tuple[bytes | None, bytes]:
    """(the compiled writer's JSON or None where it leaves the event, the generated encoder's)."""
    assert _ray_json_encode is not None
    encoder = ray_json.RayEventJsonEncoder(preserve)
    assert encoder._wire_schema is not None
    (written,) = _ray_json_encode.encode_each([wire], encoder._wire_schema)
    return written, orjson.dumps(encoder._dict_from_wire(wire))


@needs_compiled
def test_every_real_event_is_written_as_the_generated_encoder_writes_it() -> None:
    written_events = 0
    for obj in _fixture_dicts():
        event = ray_json_decode.decode_event(obj, ignore_unknown_fields=True)
        for preserve in (False, True):
            written, expected = _written_both_ways(event.SerializeToString(), preserve)
            assert (written is None) == _left_to_python(event), obj  # a node's resources, say
            assert written is None or written == expected, obj
            written_events += written is not None
    assert written_events > 100


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(ray_events())
def test_random_events_are_written_as_the_generated_encoder_writes_them(event: RayEvent) -> None:
    """Every payload type, oneofs, optional fields, unknown enum numbers, non-finite doubles, every
    timestamp digit class: the same bytes, or left to Python only for what the writer leaves."""
    wire = event.SerializeToString()
    for preserve in (False, True):
        written, expected = _written_both_ways(wire, preserve)
        if written is not None:
            assert written == expected
        else:
            assert _left_to_python(event), event


def _left_to_python(message: Any) -> bool:
    """What the compiled writer leaves: a map of more than one entry, a float field."""
    for field, value in message.ListFields():
        if field.type == field.TYPE_FLOAT:
            return True
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry_value = field.message_type.fields_by_name["value"]
            if len(value) > 1 or entry_value.type == entry_value.TYPE_FLOAT:
                return True
            if entry_value.message_type is not None and any(map(_left_to_python, value.values())):
                return True
        elif field.message_type is not None and field.message_type.full_name != "google.protobuf.Timestamp":
            items = value if field.is_repeated else [value]
            if any(map(_left_to_python, items)):
                return True
    return False


@needs_compiled
def test_odd_wire_bytes_are_left_to_python() -> None:
    """Malformed bytes, a message field given twice, two members of a oneof, a wrong wire type."""
    assert _ray_json_encode is not None
    schema = ray_json.RayEventJsonEncoder()._wire_schema
    event = RayEvent(event_id=b"e", session_name="s", message="m")
    event.timestamp.FromNanoseconds(1795311450123456789)
    wire = event.SerializeToString()
    timestamp = event.timestamp.SerializeToString()
    twice = wire + b"\x22" + bytes([len(timestamp)]) + timestamp  # field 4 (timestamp) again
    wrong_type = wire + b"\x20\x01"  # field 4 as a varint
    written = _ray_json_encode.encode_each([wire, wire[:-1], twice, wrong_type, "not bytes"], schema)  # type: ignore[list-item]
    assert written[0] == orjson.dumps(ray_json.RayEventJsonEncoder()._dict_from_wire(wire))
    assert written[1:] == [None, None, None, None]
    encoder = ray_json.RayEventJsonEncoder()
    assert orjson.loads(encoder.encode_serialized([wire, twice])) == [
        encoder._dict_from_wire(wire),
        encoder._dict_from_wire(twice),
    ]
    assert encoder.try_encode_serialized([wire, wire[:-1]]).failures[0].index == 1


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


_base64_texts = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()) | st.text(
    alphabet="AQw+/=-_é \n", max_size=12
)


@needs_compiled
@settings(max_examples=examples(400))
@given(_base64_texts, _base64_texts)
def test_base64_ids_are_decoded_as_python_decodes_them(event_id: str, task_id: str) -> None:
    """Canonical base64, unused bits set, wrong padding or length, other alphabets, non-ASCII."""
    definition = next(e for e in _fixture_dicts() if "taskDefinitionEvent" in e)
    obj = copy.deepcopy(definition)
    obj["eventId"] = event_id
    obj["taskDefinitionEvent"]["taskId"] = task_id
    if _same(obj):
        assert (
            base64.b64decode(task_id, validate=True)
            == RayEvent.FromString(
                _ray_json_wire.event_wire(obj, ray_json_decode._EVENT_SCHEMA) or b""
            ).task_definition_event.task_id
        )


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


def _mutated(rnd: random.Random, obj: Any, most: int, new_keys: list[str]) -> Any:
    """A copy of `obj` with 1..`most` changes: an odd value anywhere, or a key removed or renamed
    to one of `new_keys`."""
    obj = copy.deepcopy(obj)
    for _ in range(rnd.randint(1, most)):
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
                parent[rnd.choice(new_keys)] = value
    return obj


@needs_compiled
def test_mutated_events_read_the_same_or_are_handed_to_python_by_both() -> None:
    """Odd values anywhere; keys renamed (proto names, unknown, one field twice) or removed."""
    rnd = random.Random(20261123)
    dicts = _fixture_dicts()
    read = 0
    for _ in range(3000):
        obj = _mutated(
            rnd, rnd.choice(dicts), 3, ["task_id", "taskId", "timestamp", "node_id", "nodeId", "x"]
        )
        read += _same(obj)
    assert read > 300  # enough of them still read, not only handed over


@needs_compiled
@settings(max_examples=examples(300))
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
@settings(max_examples=examples(300))
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
@settings(max_examples=examples(200))
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
@settings(max_examples=examples(200))
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
    # The record written from the wire is the Python record's JSON, or left to Python only where a
    # list repeats a key (a dict keeps the first place and the last value).
    scope_spans = ScopeSpans(spans=[span, Span(name="next")])
    written = plain_records.span_records_json(scope_spans, context)
    repeats = any(
        len({key for key, _ in pairs}) < len(pairs)
        for pairs in [attributes, *(p for *_, p in events), *(p for *_, p in links)]
    )
    assert (written[0] is None) == repeats
    if written[0] is not None:
        assert written[0] == orjson.dumps(plain_records.span_record(_python_span_parts(span), context))
    assert written[1] == orjson.dumps(
        plain_records.span_record(_python_span_parts(scope_spans.spans[1]), context)
    )


def _span_with(attribute: bytes) -> bytes:
    """A ScopeSpans' wire bytes holding one span whose one attribute is the KeyValue `attribute`."""

    def field(key: bytes, payload: bytes) -> bytes:
        n, size = len(payload), b""
        while n >= 0x80:
            size, n = size + bytes([n & 0x7F | 0x80]), n >> 7
        return key + size + bytes([n]) + payload

    return field(b"\x12", b"\x2a\x01s" + field(b"\x4a", attribute))


@needs_compiled
def test_spans_the_record_writer_leaves_to_python() -> None:
    """A `ray.*` attribute (the bridge decides whether the span is a RayEvent), a repeated key, an
    AnyValue with two members or a KeyValue with two keys, text that is not UTF-8, nesting past the
    bound: None in that span's place, its neighbours written."""
    assert _span_records is not None
    tail = plain_records.RecordContext(Resource(), InstrumentationScope()).json_tail
    plain = _span_with(b"\x0a\x01k\x12\x03\x0a\x01v")
    assert _span_records.records(plain, tail)[0] is not None
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    nested = KeyValue(key="k", value=plain_records.python_to_any_value(deep)).SerializeToString()
    for attribute in (
        b"\x0a\x07ray.job\x12\x03\x0a\x01v",  # ray.job = "v"
        b"\x0a\x01k\x12\x05\x0a\x01v\x18\x01",  # two members: "v" and 1
        b"\x0a\x01k\x0a\x01j\x12\x03\x0a\x01v",  # two keys
        b"\x0a\x01k\x12\x03\x0a\x01\xff",  # not UTF-8
        b"\x0a\x02\xed\xa0\x12\x00",  # a surrogate in the key
    ):
        assert _span_records.records(plain + _span_with(attribute) + plain, tail) == [
            _span_records.records(plain, tail)[0],
            None,
            _span_records.records(plain, tail)[0],
        ], attribute
    assert _span_records.records(_span_with(nested), tail) == [None]
    assert _span_records.records(plain + _span_with(b"\x0a\x01k") + plain, tail)[1] is not None  # unset: null
    with pytest.raises(ValueError, match="malformed"):
        _span_records.records(plain[:-2], tail)


@needs_compiled
def test_doubles_and_text_are_written_as_orjson_writes_them() -> None:
    text = 'a\x00\x1f\x7f"\\/\n\t\r\b\x0c\u00e9\u2028\U0001f600'
    values_ = [
        0.0,
        -0.0,
        1.0,
        1e16,
        1e-7,
        2.5e300,
        float("inf"),
        float("-inf"),
        float("nan"),
        text,
        b"\x00\xff",
    ]
    span = Span(name=text, trace_state=text)
    for index, value in enumerate(values_):
        span.attributes.add(key=f"k{index}").value.CopyFrom(plain_records.python_to_any_value(value))
    span.status.message = text
    context = plain_records.RecordContext(Resource(), InstrumentationScope(name=text))
    written = plain_records.span_records_json(ScopeSpans(spans=[span]), context)
    assert written == [orjson.dumps(plain_records.span_record(_python_span_parts(span), context))]


# -- the store's fold ---------------------------------------------------------------------------------


def _outcome(func: Callable[..., Any], *args: Any) -> Any:
    """What `func` returns, or the type and message of the error it raises."""
    try:
        return ("returned", func(*args))
    except (*state_merge.FOLD_ERRORS, binascii.Error) as error:
        return ("raised", type(error), str(error))


class _HandedBack:
    """The Python functions the compiled fold hands its odd inputs to, counted while bound."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            self.calls += 1
            return func(*args)

        return counted


@pytest.fixture
def handed_back() -> Iterator[_HandedBack]:
    assert _state_fold is not None
    counter = _HandedBack()
    bound = (
        state_merge._prepare_python,
        state_merge._task_definition,
        state_merge._task_lifecycle,
        state_merge._row_columns_python,
    )
    rest = (state_merge._ROUTES, state_merge.Piece, state_merge.Prepared, state_merge._INDEX_PLAN)
    rest += (orjson.dumps,)
    _state_fold.bind(*(counter(f) for f in bound), *rest)
    try:
        yield counter
    finally:
        _state_fold.bind(*bound, *rest)


_PYTHON_FOLD: dict[Any, Any] = {}
if _state_fold is not None:
    _PYTHON_FOLD = {
        _state_fold.task_definition: state_merge._task_definition,
        _state_fold.task_lifecycle: state_merge._task_lifecycle,
    }


def _fold_both(events: list[Any]) -> int:
    """Each event read and folded by the compiled steps and by Python, into rows of their own;
    every step must give the same result (or error) and leave the same row, key order included.
    Returns how many pieces were folded."""
    assert _state_fold is not None
    compiled_rows: dict[Any, dict[str, Any]] = {}
    python_rows: dict[Any, dict[str, Any]] = {}
    folded = 0
    for event in events:
        compiled = _outcome(_state_fold.prepare, event)
        assert compiled == _outcome(state_merge._prepare_python, event), event
        if compiled[0] != "returned" or compiled[1].piece is None:
            continue
        key, piece = compiled[1].key, compiled[1].piece
        compiled_row = compiled_rows.setdefault(key, {})
        python_row = python_rows.setdefault(key, {})
        python_piece = piece._replace(fold=_PYTHON_FOLD.get(piece.fold, piece.fold))
        outcome = _outcome(state_merge.apply, compiled_row, piece)
        assert outcome == _outcome(state_merge.apply, python_row, python_piece), event
        assert repr(compiled_row) == repr(python_row), event
        columns = _outcome(_state_fold.row_columns, piece.resource, compiled_row)
        assert columns == _outcome(state_merge._row_columns_python, piece.resource, python_row)
        folded += outcome[0] == "returned"
    return folded


@needs_compiled
def test_every_real_event_folds_to_the_same_rows(handed_back: _HandedBack) -> None:
    dicts = _fixture_dicts()
    assert _fold_both(dicts + dicts) > 150  # and again: each piece into the row it already made
    assert handed_back.calls < len(dicts) // 10  # the compiled steps read Ray's own shapes themselves


@needs_compiled
def test_pieces_folded_in_any_order_give_the_same_rows() -> None:
    rnd = random.Random(7)
    dicts = [d for d in _fixture_dicts() if str(d.get("eventType", "")).startswith(("TASK", "ACTOR_TASK"))]
    for _ in range(50):
        rnd.shuffle(dicts)
        _fold_both(dicts)


@needs_compiled
def test_mutated_events_fold_the_same_or_are_handed_to_python() -> None:
    """Odd values anywhere in a task's pieces; keys renamed or removed; then folded in order."""
    rnd = random.Random(20261124)
    dicts = [d for d in _fixture_dicts() if str(d.get("eventType", "")).startswith(("TASK", "ACTOR_TASK"))]
    folded = 0
    for _ in range(1500):
        obj = _mutated(rnd, rnd.choice(dicts), 2, ["taskId", "timestamp", "state", "jobId", "x"])
        folded += _fold_both([obj, copy.deepcopy(rnd.choice(dicts)), obj])
    assert folded > 1500


@needs_compiled
@settings(max_examples=examples(300))
@given(st.binary(max_size=40) | st.text(alphabet="AQZaz09+/=_- ", max_size=12))
def test_ids_decode_as_python_does(raw: bytes | str) -> None:
    assert _state_fold is not None
    text = base64.b64encode(raw).decode() if isinstance(raw, bytes) else raw
    compiled = _state_fold.hex_id(text)
    if isinstance(raw, bytes):
        assert compiled == raw.hex()  # a canonical id is always decoded, never handed over
    if compiled is not None:
        assert compiled == state_merge.hex_id(text)


@needs_compiled
@settings(max_examples=examples(300))
@given(
    st.integers(min_value=0, max_value=9999),
    st.integers(min_value=0, max_value=13),
    st.integers(min_value=0, max_value=32),
    st.integers(min_value=0, max_value=61),
    st.text(alphabet="0123456789", min_size=8, max_size=10),
)
def test_times_read_as_python_does(year: int, month: int, day: int, second: int, fraction: str) -> None:
    assert _state_fold is not None
    stamp = f"{year:04d}-{month:02d}-{day:02d}T23:59:{second:02d}.{fraction}Z"
    compiled = _state_fold.time_ns(stamp)
    python = _outcome(state_merge.rfc3339_ns, stamp)
    if compiled is not None:
        assert python == ("returned", compiled)
    elif 1970 <= year < 2262 and len(fraction) == 9 and python[0] == "returned" and second < 60:
        raise AssertionError(f"{stamp} is Ray's form and should be read, not handed over")


def _fold_rows_both(events: list[Any], seen: int) -> tuple[int, int]:
    """The events' pieces folded into fresh rows (each seeded with `seen` of its own event ids, as
    if stored before) by the compiled loop and by its Python twin, each resumed past a failed row
    as the store resumes it: the same stops, counts, upserts and rows. Returns (rows done, rows
    failed)."""
    assert _state_fold is not None
    pieces: dict[Any, list[Any]] = {}
    for position, event in enumerate(events):
        outcome = _outcome(state_merge.prepare, event)
        if outcome[0] == "returned" and outcome[1].piece is not None:
            prepared = outcome[1]
            pieces.setdefault(prepared.key, []).append((position, prepared.event_id, prepared.piece))
    keys = list(pieces)
    results = []
    for fold_rows in (_state_fold.fold_rows, row_fold._fold_rows_python):
        rows = {
            key: row_fold.StoredRow({}, [kept_ids.event_hash(fold[1]) for fold in pieces[key][:seen]])
            for key in keys
        }
        by_type: dict[str, int] = {}
        changed: list[tuple[Any, ...]] = []
        stops = []
        start = 0
        while start < len(keys):
            stop = fold_rows(keys, start, pieces, rows, 1.5, by_type, changed)
            stops.append(stop)
            start = stop[0] + 1
        results.append((stops, by_type, changed, repr(rows)))
    assert results[0] == results[1]
    return len(keys), len(results[0][0]) - 1


@needs_compiled
def test_a_chunks_rows_fold_as_python_folds_them() -> None:
    dicts = _fixture_dicts()
    done, failed = _fold_rows_both(dicts + dicts, 0)  # every piece twice: the second a duplicate
    assert done > 20 and failed == 0
    _fold_rows_both(dicts, 1)


@needs_compiled
def test_a_batch_is_grouped_by_row_as_python_groups_it() -> None:
    assert _state_fold is not None
    dicts = _fixture_dicts()
    prepared = [state_merge.prepare(event) for event in dicts + dicts[::-1]]
    prepared.insert(3, state_merge.Prepared("an event of a type with no row", None, None))
    pieces, ignored = _state_fold.group_pieces(prepared)
    assert (pieces, ignored) == row_fold._group_pieces_python(prepared)
    assert list(pieces) == list(row_fold._group_pieces_python(prepared)[0])  # rows in first-seen order
    assert ignored == 1 and len(pieces) > 20
    with pytest.raises(TypeError):
        _state_fold.group_pieces([("event id", None)])


@needs_compiled
def test_rows_that_fail_stop_the_compiled_loop_where_python_stops() -> None:
    rnd = random.Random(20261125)
    dicts = [d for d in _fixture_dicts() if str(d.get("eventType", "")).startswith(("TASK", "ACTOR_TASK"))]
    failed = 0
    for _ in range(300):
        batch = [copy.deepcopy(rnd.choice(dicts)) for _ in range(6)]
        batch += [
            _mutated(rnd, rnd.choice(dicts), 2, ["taskId", "timestamp", "state", "x"]) for _ in range(3)
        ]
        rnd.shuffle(batch)
        failed += _fold_rows_both(batch, rnd.randint(0, 1))[1]
    assert failed > 20  # the mutations made rows fail, and both loops stopped at each of them


@needs_compiled
def test_the_compiled_event_hash_is_the_one_python_keeps() -> None:
    """The hash a row keeps of each event id: native/event_hash.h's (here through _state_fold; the
    compiled intake fold includes the same header) is hashlib's BLAKE2b-64 (kept_ids), for ids of
    every length around BLAKE2b's 128-byte block, Ray's base64 ids, non-ASCII and lone surrogates;
    and its value for one id is pinned, since stored rows keep it."""
    assert _state_fold is not None
    rnd = random.Random(20261202)
    ids = ["", "a", "abc", *("x" * n for n in (7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000))]
    ids += [base64.b64encode(rnd.randbytes(rnd.choice((16, 28, 29, 40)))).decode() for _ in range(2000)]
    ids += ["".join(chr(rnd.randint(1, 0x10FFFF)) for _ in range(rnd.randint(1, 80))) for _ in range(500)]
    ids += ["\u00e9v\u00e9nement", "\ud800", "a\udfff b", "x" * 130 + "\u4e2d"]
    hashes = set()
    for event_id in ids:
        hashed = _state_fold.event_hash(event_id)
        assert hashed == kept_ids.event_hash(event_id), event_id
        hashes.add(hashed)
    assert len(hashes) == len(set(ids))
    assert kept_ids.event_hash("abc") == 0x5995D533D814BBD8  # hashlib.blake2b(b"abc", digest_size=8), LE
    with pytest.raises(TypeError):
        _state_fold.event_hash(b"abc")  # type: ignore[arg-type]


# -- the store's row writer --------------------------------------------------------------------------


def _store_rows(store: EventStore) -> list[tuple[Any, ...]]:
    return unpacked(store._query(SELECT_ROWS))


@needs_row_writer
def test_the_row_writer_stores_what_executemany_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every captured event in batches of 20 folded 3 rows a chunk (pieces of a row in several
    batches, a batch in several chunks), each batch twice (duplicates), a refused piece: the same
    rows, column for column."""
    monkeypatch.setattr(sqlite_store, "_FOLD_CHUNK", 3)
    dicts = _fixture_dicts()
    bad = copy.deepcopy(next(d for d in dicts if d.get("eventType") == "TASK_LIFECYCLE_EVENT"))
    bad["eventId"] = "bad-time"
    bad["taskLifecycleEvent"]["stateTransitions"][0]["timestamp"] = "yesterday"
    events = [*dicts, bad]
    stores = [EventStore(tmp_path / "compiled.sqlite3"), EventStore(tmp_path / "python.sqlite3")]
    assert stores[0]._writer is not None
    stores[1]._writer.close()  # type: ignore[union-attr]
    stores[1]._writer = None
    results = []
    for store in stores:
        for start in range(0, len(events), 20):
            results.append(store.ingest(events[start : start + 20], now=1000.0 + start))
            results.append(store.ingest(events[start : start + 20], now=2000.0 + start))
    half = len(results) // 2
    assert results[:half] == results[half:]
    assert any(r.refused for r in results[:half]) and sum(r.duplicates for r in results[:half]) > 150
    assert _store_rows(stores[0]) == _store_rows(stores[1])
    assert len(_store_rows(stores[0])) > 30
    for store in stores:
        store.close()
    reopened = EventStore(tmp_path / "compiled.sqlite3", read_only=True)
    assert len(_store_rows(reopened)) > 30  # committed by the writer's own connection
    reopened.close()


@needs_row_writer
def test_a_row_the_writer_cannot_store_rolls_back_its_batch(tmp_path: Path) -> None:
    assert _row_writer is not None
    path = tmp_path / "w.sqlite3"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER CHECK (n >= 0))")
    setup.close()
    writer = _row_writer.RowWriter(str(path), "INSERT INTO t VALUES (?, ?)", "", 2, sqlite3.DatabaseError)
    with pytest.raises(TypeError, match="tuple of 2"):
        writer.add([("a", 1, 2)])
    with pytest.raises(OverflowError):
        writer.add([("a", 2**64)])
    with pytest.raises(TypeError, match="cannot be stored"):
        writer.add([("a", [1])])
    writer.add([("a", 1), ("é" * 3, 2.5)])
    writer.add([("b", -1)])  # fails the CHECK
    writer.add([("c", 3)])  # after a failure: skipped, rolled back with the rest
    with pytest.raises(sqlite3.DatabaseError, match="CHECK constraint failed"):
        writer.commit()
    writer.add([("d", None), ("e", True)])
    writer.commit()
    writer.add([("f", 6)])
    writer.rollback()
    writer.close()
    stored = sqlite3.connect(path).execute("SELECT k, n FROM t ORDER BY k").fetchall()
    assert stored == [("d", None), ("e", 1)]


def _upsert(entity_id: str, session: Any, received: float, resource: str = "tasks") -> tuple[Any, ...]:
    """The store's upsert values of a bare row of `entity_id` in `session`."""
    data = orjson.dumps({"task_id": entity_id}).decode()
    return (resource, entity_id, 0, session, received, data, "e", *[None] * len(state_merge.INDEXED_COLUMNS))


@needs_row_writer
def test_the_writer_numbers_sessions_and_resources_as_the_python_writer_does(tmp_path: Path) -> None:
    """A row's session is stored as the number of its name in `sessions` (made when new, seen at
    the row's time) and its resource as its number: by the compiled writer as by the Python one
    (`_packed`, executemany), in batches of several sessions, after upkeep dropped a session the
    writer had numbered (a new number, never the dropped one), and after a rolled-back batch."""
    stores = [EventStore(tmp_path / "compiled.sqlite3"), EventStore(tmp_path / "python.sqlite3")]
    assert stores[0]._writer is not None
    stores[1]._writer.close()  # type: ignore[union-attr]
    stores[1]._writer = None
    ab, ba = "ab" * 24, "ba" * 24
    batches = [
        [_upsert(ab, "s1", 5.0), _upsert(ba, "s2", 5.0), _upsert("x", "s1", 5.0, "actors")],
        # its last session is the writer's last: numbered again once upkeep dropped it
        [
            _upsert(ab, "s2", 6.0),
            _upsert(ba, "s3", 6.0, "placement_groups"),
            _upsert(ab, "s2", 6.0, "other"),
            _upsert(ba, "s1", 6.0),
        ],
        "drop s1",
        [_upsert(ab, "s1", 7.0), _upsert(ba, "s2", 7.0)],
        "rolled back",
        [_upsert(ba, "s4", 9.0), _upsert(ab, "s1", 9.0)],
    ]
    for store in stores:
        for number, batch in enumerate(batches):
            if batch == "drop s1":
                assert store.drop_session("s1") == 3
            elif batch == "rolled back":
                with pytest.raises(RuntimeError), store._row_writes({}, 8.0) as write:
                    write([_upsert(ab, "s4", 8.0), _upsert(ba, "s1", 8.0)])
                    raise RuntimeError("the batch fails")
            else:
                with store._row_writes({}, float(number)) as write:
                    write(list(batch))
    sessions, rows = (
        [store._query("SELECT * FROM sessions ORDER BY id") for store in stores],
        [
            store._query("SELECT resource, entity_id, session, updated FROM state_rows ORDER BY rowid")
            for store in stores
        ],
    )
    assert (
        sessions[0]
        == sessions[1]
        == [
            (2, "s2", 5.0, 7.0),
            (3, "s3", 6.0, 6.0),
            (4, "s1", 7.0, 9.0),
            (5, "s4", 9.0, 9.0),
        ]
    )
    assert rows[0] == rows[1]
    assert {(resource, session) for resource, _, session, _ in rows[0]} == {
        (1, 2),
        (6, 3),
        ("other", 2),
        (1, 4),
        (1, 5),
    }
    assert {entity for _, entity, _, _ in rows[0]} == {bytes.fromhex(ab), bytes.fromhex(ba)}
    for store in stores:
        assert store.entity_rows("tasks", ab.upper(), "s1")[0][:2] == (0, "s1")
        assert store.select("other").rows == [{"task_id": ab}]
        store.close()


_HEX_ID_TEXTS = [
    "",
    "a",
    "ab",
    "AB",
    "aB0f",
    "0g",
    "ab cd",
    " abcd",
    "ab\n",
    "é" * 2,
    "00",
    "f" * 1024,
    "f" * 1026,
]


@needs_row_writer
def test_the_writer_stores_hex_ids_as_row_packing_reads_them(tmp_path: Path) -> None:
    """A column named in `hex_ids` holds what `id_value` (the Python writer's) gives: a hex text of
    whole bytes as them, any other value as it is."""
    assert _row_writer is not None
    path = tmp_path / "w.sqlite3"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (n INTEGER, v, w)")
    setup.close()
    writer = _row_writer.RowWriter(
        str(path), "INSERT INTO t VALUES (?, ?, ?)", "", 3, sqlite3.DatabaseError, hex_ids=bytes([1])
    )
    values: list[object] = [*_HEX_ID_TEXTS, None, 7, 1.5]
    writer.add([(n, value, value) for n, value in enumerate(values)])
    writer.commit()
    writer.close()
    stored = sqlite3.connect(path).execute("SELECT v, w FROM t ORDER BY n").fetchall()
    assert stored == [(id_value(value), value) for value in values]
    assert sum(isinstance(v, bytes) for v, _ in stored) == 5
    with pytest.raises(ValueError, match="hex_ids"):
        _row_writer.RowWriter(
            str(path), "INSERT INTO t VALUES (?, ?, ?)", "", 3, ValueError, hex_ids=bytes([3])
        )


@needs_row_writer
def test_the_writer_packs_a_row_against_its_own_ids_as_pack_row_does(tmp_path: Path) -> None:
    """A row packed with `row_ids` (PACKED_V2): the bytes `pack_row` gives for its JSON and its id
    columns as they are stored (hex texts as their bytes, `id_value`; bytes as they are; any other
    value adding nothing to its dictionary), for ids of every shape; without `row_ids`, PACKED_V1."""
    assert _row_writer is not None
    path = tmp_path / "w.sqlite3"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (n INTEGER, e, data, node, worker)")
    setup.close()
    sql = "INSERT INTO t VALUES (?, ?, ?, ?, ?)"
    shapes: list[object] = [*_HEX_ID_TEXTS, None, 7, b"\x01\xff", b"", "ab" * 24, "CD" * 28, "ef" * 512]
    rnd = random.Random(11)
    rows = []
    for n in range(300):
        e, node, worker = (rnd.choice(shapes) for _ in range(3))
        shown = [v.hex() if isinstance(v, bytes) else v for v in (e, node, worker)]
        text = orjson.dumps(
            dict(zip(("task_id", "node_id", "worker_id"), shown, strict=True), n=n) if n % 7 else {}
        )
        rows.append((n, e, text.decode(), node, worker))
    for row_ids in (bytes([1, 3, 4]), b""):
        if path.exists():
            sqlite3.connect(path).execute("DELETE FROM t").connection.commit()
        writer = _row_writer.RowWriter(
            str(path),
            sql,
            "",
            5,
            sqlite3.DatabaseError,
            packed=2,
            dictionary=ROW_DICTIONARY,
            hex_ids=bytes([1, 3, 4]),
            row_ids=row_ids,
        )
        writer.add(rows)
        writer.commit()
        writer.close()
        stored = sqlite3.connect(path).execute("SELECT e, data, node, worker FROM t ORDER BY n").fetchall()
        assert [(e, node, worker) for e, _, node, worker in stored] == [
            tuple(id_value(v) for v in (e, node, worker)) for _, e, _, node, worker in rows
        ]
        wanted = [
            pack_row(text, [e, node, worker] if row_ids else None)
            for e, text, node, worker in (
                (id_value(r[1]), r[2], id_value(r[3]), id_value(r[4])) for r in rows
            )
        ]
        assert [data for _, data, _, _ in stored] == wanted
        assert {data[0] for _, data, _, _ in stored} == {PACKED_V2 if row_ids else PACKED_V1}
        assert [row_json(data, [e, node, worker]) for e, data, node, worker in stored] == [
            r[2].encode() for r in rows
        ]
    with pytest.raises(ValueError, match="row_ids"):
        _row_writer.RowWriter(str(path), sql, "", 5, ValueError, packed=2, row_ids=bytes([5]))
    with pytest.raises(ValueError, match="row_ids"):
        _row_writer.RowWriter(str(path), sql, "", 5, ValueError, packed=2, row_ids=bytes([1, 2, 3, 4]))


def _iso_or_error(write: Callable[[int], str], ns: int) -> str:
    try:
        return write(ns)
    except (ValueError, OverflowError, OSError) as exc:  # out of datetime's range: the same error
        return type(exc).__name__


_NS_PER_S = 10**9


@needs_compiled
@settings(max_examples=examples(3000), deadline=None)
@given(
    st.one_of(
        st.integers(min_value=0, max_value=2**62),
        st.integers(min_value=-(2**63), max_value=2**64),
        # Fractions next to a half microsecond and to the next second: where the rounding decides.
        st.tuples(
            st.integers(min_value=0, max_value=253_402_300_799),
            st.integers(min_value=0, max_value=999_999),
            st.integers(min_value=-3, max_value=3),
        ).map(lambda t: t[0] * _NS_PER_S + t[1] * 1000 + 500 + t[2]),
        st.integers(min_value=0, max_value=253_402_300_800).map(lambda s: s * _NS_PER_S - 1),
    )
)
def test_span_line_iso_times_are_the_python_ones(ns: int) -> None:
    assert _span_json is not None
    assert _iso_or_error(_span_json.iso, ns) == _iso_or_error(span_json.python_ns_to_iso_str, ns)


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(ray_events())
def test_event_dicts_read_back_from_the_compiled_writer_are_to_dicts(event: RayEvent) -> None:
    """Same keys in the same order, same values of the same types (orjson tells 1 from True)."""
    for encoder in (ray_json.RayEventJsonEncoder(), ray_json.RayEventJsonEncoder(True)):
        try:
            expected = encoder.to_dict(event)
        except ValueError as exc:
            with pytest.raises(type(exc)):
                encoder.event_dict(event)
            continue
        assert orjson.dumps(encoder.event_dict(event)) == orjson.dumps(expected)
