"""A POST's RayEvents read in one compiled pass over its text (native/_posted_events.c) against the
Python path they copy (orjson, the RayEvent reader, upb's serialization, the head and the record
walk): the same events, heads, wire bytes, log records and errors, on every captured event and on
random, mutated and malformed bodies; and the bridge's answers with the compiled helpers off."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.encoding.ray_json_posts import NotAnArrayError
from ray_otel_events.otel import event_heads, posted_events
from ray_otel_events.otel.log_records import parts_log_record
from ray_otel_events.otel.posted_events import EventParts, read_posted_events, read_posted_events_python
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled as needs_compiled_twin
from tests.helpers.pure_python import run_pure_python
from tests.test_compiled_helpers import _ODD_VALUES, _mutated
from tests.test_otlp_wire import _fixture_dicts
from tests.test_ray_json import ray_events

needs_compiled = needs_compiled_twin(posted_events._read is not None, "native/_posted_events.c")


def _record(parts: EventParts) -> bytes:
    source = parts.source if parts.source is not None else parts.wire
    return parts_log_record(parts.head, parts.body, parts.attributes, source, b"t" * 16, b"s" * 8, 7)


def _outcome(body: bytes, read: Any) -> Any:
    try:
        parts, errors = read(body)
    except NotAnArrayError as exc:
        return ("refused", str(exc))
    return [(p.head, p.wire, _record(p)) for p in parts], errors


def _taken(body: bytes) -> int:
    """How many items the compiled pass wrote itself (None: it left the whole body)."""
    read = posted_events._read(body)  # type: ignore[misc]
    return -1 if read is None else sum(type(item) is EventParts for item in read[0])


def _same(body: bytes) -> int:
    assert _outcome(body, read_posted_events) == _outcome(body, read_posted_events_python)
    return _taken(body)


@needs_compiled
def test_every_captured_event_is_read_as_the_python_path_reads_it() -> None:
    dicts = _fixture_dicts()
    body = orjson.dumps(dicts)
    assert _same(body) == len(dicts)  # every one of them written by the compiled pass
    for item in dicts:  # one at a time too, and as Python's json writes them (spaces, \u escapes)
        assert _same(orjson.dumps([item])) == 1
        assert _same(json.dumps([item], ensure_ascii=True, indent=1).encode()) == 1


@needs_compiled
@settings(max_examples=examples(150), deadline=None)
@given(st.lists(ray_events(), min_size=1, max_size=4))
def test_random_events_are_read_as_the_python_path_reads_them(events: list[RayEvent]) -> None:
    """What an aggregator posts of random events (every type, odd values, maps, lists)."""
    _same(RayEventJsonEncoder().encode(events))
    _same(RayEventJsonEncoder(preserve_proto_field_name=True).encode(events))  # proto names: Python's


@needs_compiled
def test_mutated_events_are_read_the_same_or_left_to_python() -> None:
    """Odd values anywhere; keys renamed (proto names, unknown, one field twice) or removed."""
    rnd = random.Random(20261125)
    dicts = _fixture_dicts()
    taken = 0
    for _ in range(600):
        items = [
            _mutated(rnd, rnd.choice(dicts), 3, ["task_id", "taskId", "timestamp", "node_id", "nodeId", "x"])
            for _ in range(3)
        ]
        items.insert(rnd.randint(0, 3), rnd.choice(dicts))
        taken += max(0, _same(json.dumps(items).encode()))  # \u escapes; lone surrogates refused
    assert taken > 400  # untouched items and many mutated ones taken by the compiled pass


def _text_changes(rnd: random.Random, text: str) -> str:
    """The same JSON spelled otherwise, or a key given twice."""
    roll = rnd.random()
    if roll < 0.3:  # a key twice: orjson keeps the last value, at the first place
        at = text.index("{", 1) + 1
        return text[:at] + rnd.choice(['"eventId":"AAAA",', '"message":"m",', '"nodeId":"",']) + text[at:]
    if roll < 0.5:
        return text.replace(",", " ,\n\t", rnd.randint(1, 20))
    if roll < 0.7:  # numbers in other forms
        return text.replace(":0,", rnd.choice([":0.0,", ":-0,", ":0e0,", ":-0.0,", ":1E-400,"]), 3)
    if roll < 0.85:  # strings escaped
        return text.replace("A", "\\u0041", rnd.randint(1, 30)).replace("/", "\\/", 3)
    return text.replace(":1.0", rnd.choice([":1", ":1.5e300", ":1e400", ":18446744073709551615"]), 2)


@needs_compiled
def test_the_same_json_spelled_otherwise_reads_the_same() -> None:
    rnd = random.Random(7)
    dicts = _fixture_dicts()
    for _ in range(400):
        text = orjson.dumps(rnd.sample(dicts, 3)).decode()
        _same(_text_changes(rnd, text).encode())


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b" ",
        b"{}",
        b'"x"',
        b"[1,]",
        b"[}",
        b"[]x",
        b"\xef\xbb\xbf[]",
        b'["\xff"]',
        b'["\\ud800"]',
        b'["\\udc00"]',
        b'["\x01"]',
        b"[01]",
        b"[1.]",
        b"[NaN]",
        b"[1e400]",
        b"[" * 600 + b"]" * 600,
        b"[]",
        b" [ ] ",
        b'[1, "x", null, [], {}]',
        b'[{"eventType": "TASK_DEFINITION_EVENT"}]',
        b'[{"eventType": 0}, {"eventType": "EVENT_TYPE_UNSPECIFIED"}, {}]',
        b'[{"eventType": "NO_SUCH_TYPE"}, {"sessionName": "\\ud83d\\ude00"}]',
        b'[{"eventType": "TASK_DEFINITION_EVENT", "taskDefinitionEvent": {"taskId": "AAAA", "x": 1}}]',
        b'[{"eventType":"NODE_DEFINITION_EVENT","nodeDefinitionEvent":{"labels":{"a":"1","a":"2"}}}]',
        b'[{"eventType":"NODE_DEFINITION_EVENT","nodeDefinitionEvent":{"labels":{"b":"1","a":"2"}}}]',
        b'[{"eventType":"TASK_DEFINITION_EVENT","timestamp":"2020-01-01T00:00:00Z","severity":"INFO"}]',
        b'[{"eventType":"TASK_LIFECYCLE_EVENT","taskLifecycleEvent":{"stateTransitions":[]}}]',
        b'[{"eventType":"TASK_LIFECYCLE_EVENT","taskLifecycleEvent":{"stateTransitions":[1]}}]',
        b'[{"eventType":"TASK_DEFINITION_EVENT","taskDefinitionEvent":{"requiredResources":{"CPU":-0.0}}}]',
        # escaped strings read, then the item left to Python and its strings read again
        b'[{"eventType":"NODE_DEFINITION_EVENT","message":"' + b"a" * 5000 + b'\\n","x":1}]',
    ],
)
def test_odd_bodies_get_the_python_paths_answer(body: bytes) -> None:
    assert _outcome(body, read_posted_events) == _outcome(body, read_posted_events_python)


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(_ODD_VALUES) | st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 5))
def test_odd_values_in_every_place_read_the_same(value: Any, where: int) -> None:
    definition = copy.deepcopy(next(d for d in _fixture_dicts() if "taskDefinitionEvent" in d))
    payload = definition["taskDefinitionEvent"]
    place = [
        (payload, "taskAttempt"),
        (payload["requiredResources"], "CPU"),
        (payload, "taskName"),
        (payload, "language"),
        (definition, "timestamp"),
        (payload, "isDetachedActor"),
    ][where]
    place[0][place[1]] = value
    _same(json.dumps([definition]).encode())


def test_the_python_path_reads_posts_with_the_compiled_helpers_off() -> None:
    code = (
        "from ray_otel_events.otel import posted_events\n"
        "print(posted_events._read is None, len(posted_events.read_posted_events(b'[1, {}]')[1]))\n"
    )
    assert run_pure_python(code) == "True 2"


# -- events forwarded to the worker that owns them ---------------------------------------------------


def _pieces_both_ways(events: list[EventParts], records: bool) -> tuple[bytes, list[EventParts]]:
    """(encoded, decoded), compiled where built; the Python twin gives the same."""
    data = posted_events.encode_pieces(events, records)
    decoded = posted_events.decode_pieces(data)
    saved = posted_events._pieces, posted_events._read_pieces
    posted_events._pieces = posted_events._read_pieces = None
    try:
        assert posted_events.encode_pieces(events, records) == data
        assert posted_events.decode_pieces(data) == decoded
    finally:
        posted_events._pieces, posted_events._read_pieces = saved
    return data, decoded


def test_forwarded_pieces_carry_what_the_owner_writes_the_record_from() -> None:
    """Captured events as the compiled pass reads them and as the Python path does (their bodies
    walked from the posted objects): the owner gets each event's head, wire bytes and its record's
    entries, and writes the same record without walking the event again."""
    body = orjson.dumps(_fixture_dicts())
    for read in (read_posted_events, read_posted_events_python):
        events, _ = read(body)
        _, decoded = _pieces_both_ways(events, records=True)
        assert [(p.head, p.wire) for p in decoded] == [(p.head, p.wire) for p in events]
        assert all(p.body is not None and p.source is None for p in decoded)
        assert [_record(p) for p in decoded] == [_record(p) for p in events]
        _, bare = _pieces_both_ways(events, records=False)  # an assemble-only owner writes no records
        assert [(p.head, p.wire, p.body, p.attributes) for p in bare] == [
            (p.head, p.wire, None, b"") for p in events
        ]


@settings(max_examples=examples(100), deadline=None)
@given(ray_events(), st.integers(0, 200))
def test_a_cut_piece_is_refused_by_both(event: RayEvent, cut: int) -> None:
    events, _ = read_posted_events(RayEventJsonEncoder().encode([event]))
    data, decoded = _pieces_both_ways(events, records=True)
    assert [(p.head, p.wire, _record(p)) for p in decoded] == [(p.head, p.wire, _record(p)) for p in events]
    short = data[: max(0, len(data) - 1 - cut)]
    if not short:
        return
    with pytest.raises(ValueError):
        posted_events.decode_pieces(short)
    saved = posted_events._read_pieces
    posted_events._read_pieces = None
    try:
        with pytest.raises(ValueError):
            posted_events.decode_pieces(short)
    finally:
        posted_events._read_pieces = saved


@pytest.mark.parametrize("compiled", [True, False], ids=["as-built", "python"])
def test_a_head_read_from_wire_bytes_keeps_the_payload_as_they_hold_it(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A map of several entries (a node's resources): upb writes one parsed from bytes in an order
    of its own, so the head read from the wire bytes a bridge worker is forwarded takes the payload
    as those bytes hold it (as the compiled reader does), not re-serialized; the owner then writes
    the record the receiving worker would."""
    if not compiled:
        monkeypatch.setattr(event_heads, "_compiled", False)
    events, errors = read_posted_events_python(orjson.dumps(_fixture_dicts()))
    assert errors == [] and len(events) > 100
    for parts in events:
        head = event_heads.wire_head(parts.wire)
        assert head == parts.head
        assert head.payload in parts.wire
