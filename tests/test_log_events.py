"""A logs request's RayEvents read in one compiled pass over its protobuf bytes (native/_log_events.c)
against the Python path it stands in for (ExportLogsServiceRequest.FromString, then
claims_ray_event and ray_event_from_log_record per record): where the pass answers, the same events,
event types and RayEvent JSON, on every captured event and on random, mutated and malformed
requests; where the Python path would reject a record or refuse the request, the pass leaves it."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.encoding.ray_json_decode import decode_event
from ray_otel_events.otel import to_ray_events
from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.otel.plain_records import key_values, python_to_any_value
from ray_otel_events.otel.to_ray_events import (
    NotARayEventError,
    claims_ray_event,
    ray_event_from_log_record,
    ray_event_wires,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled as needs_compiled_twin
from tests.helpers.pure_python import run_pure_python
from tests.test_compiled_helpers import _ODD_VALUES, _mutated
from tests.test_otlp_wire import _fixture_dicts
from tests.test_ray_json import ray_events

needs_compiled = needs_compiled_twin(to_ray_events._read_log_events is not None, "native/_log_events.c")
ENCODER = RayEventJsonEncoder()


def _request(
    records: list[tuple[str, Any]],
    attributes: dict[str, Any] | None = None,
    ids: tuple[bytes, bytes] = (b"", b""),
) -> bytes:
    """A request of log records (event name, body as a Python value), like our producer's."""
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.extend(key_values({"service.name": "ray", "ray.session_name": "s"}))
    scope = resource_logs.scope_logs.add()
    scope.scope.name = "ray_otel_events"
    for name, body in records:
        record = scope.log_records.add(time_unix_nano=7, event_name=name, trace_id=ids[0], span_id=ids[1])
        python_to_any_value(body, record.body)
        record.attributes.extend(key_values(attributes or {"ray.event.type": "x", "n": 1}))
    return request.SerializeToString()


def _of_events(events: list[RayEvent]) -> bytes:
    """A request as the OTel side writes our events (otel/log_records.to_log_record)."""
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for event in events:
        fields = to_log_record(event)
        record = scope.log_records.add(time_unix_nano=fields.timestamp_ns, event_name=fields.event_name)
        python_to_any_value(fields.body, record.body)
        record.attributes.extend(key_values(fields.attributes))
    return request.SerializeToString()


def _checked(body: bytes) -> int:
    """How many events the pass read (-1: it left the request); where it read them, they are the
    Python path's, record for record, and so is their JSON."""
    read = ray_event_wires(body)
    if read is None:
        return -1
    wires, types = read
    request = ExportLogsServiceRequest.FromString(body)  # the pass never takes what upb refuses
    records = [r for rl in request.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    for record in records:
        assert len(record.trace_id) in (0, 16) and len(record.span_id) in (0, 8)
        assert claims_ray_event(record)
    events = [ray_event_from_log_record(record) for record in records]
    assert [RayEvent.FromString(wire) for wire in wires] == events
    assert types == [event.event_type for event in events]
    assert ENCODER.encode_serialized(wires) == ENCODER.encode(events)
    return len(wires)


@needs_compiled
def test_every_captured_event_is_read_as_the_python_path_reads_it() -> None:
    events = [decode_event(item) for item in _fixture_dicts()]
    assert _checked(_of_events(events)) == len(events)
    for event in events:
        assert _checked(_of_events([event])) == 1


@needs_compiled
@settings(max_examples=examples(150), deadline=None)
@given(st.lists(ray_events(), min_size=1, max_size=4))
def test_random_events_are_read_as_the_python_path_reads_them(events: list[RayEvent]) -> None:
    _checked(_of_events(events))


@needs_compiled
def test_mutated_bodies_are_read_the_same_or_left_to_python() -> None:
    """Odd values anywhere (bytes, None, big numbers, other kinds); keys renamed or removed."""
    rnd = random.Random(20261125)
    dicts = _fixture_dicts()
    taken = 0
    for _ in range(500):
        item = rnd.choice(dicts)
        name = to_log_record(decode_event(item)).event_name
        body = _mutated(rnd, item, 3, ["task_id", "taskId", "timestamp", "node_id", "nodeId", "x"])
        for place in _paths_to_bytes(body, rnd):
            place[0][place[1]] = b"\x00\xff"
        try:
            request = _request([(name, body), (name, item)])
        except ValueError:  # an int out of int64, a lone surrogate: not an AnyValue
            continue
        taken += max(0, _checked(request))
    assert taken > 100  # requests whose mutated body the Python path reads whole too


def _paths_to_bytes(body: dict[str, Any], rnd: random.Random) -> list[tuple[dict[str, Any], str]]:
    """Now and then a place for a bytes value (AnyValue bytes_value, read as its base64 by Python)."""
    return [(body, "eventId")] if rnd.random() < 0.1 and "eventId" in body else []


@needs_compiled
@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(_ODD_VALUES) | st.floats(allow_nan=False), st.integers(0, 5))
def test_odd_values_in_every_place_read_the_same(value: Any, where: int) -> None:
    definition = next(d for d in _fixture_dicts() if "taskDefinitionEvent" in d)
    name = to_log_record(decode_event(definition)).event_name
    body = copy.deepcopy(definition)
    payload = body["taskDefinitionEvent"]
    place = [
        (payload, "taskAttempt"),
        (payload["requiredResources"], "CPU"),
        (payload, "taskName"),
        (payload, "language"),
        (body, "timestamp"),
        (payload, "isDetachedActor"),
    ][where]
    place[0][place[1]] = value
    try:
        request = _request([(name, body)])
    except ValueError:  # an int out of int64, a lone surrogate: not an AnyValue
        return
    _checked(request)


@needs_compiled
def test_requests_the_python_path_answers_otherwise_are_left_to_it() -> None:
    """A record that is not such a RayEvent (rejected or forwarded by the Python path), or ids the
    receiver drops: the whole request takes the Python path."""
    definition = next(d for d in _fixture_dicts() if "taskDefinitionEvent" in d)
    name = to_log_record(decode_event(definition)).event_name
    assert _checked(_request([(name, definition)])) == 1
    for request in (
        _request([(name, definition), ("http.request", {"a": 1})]),  # not a RayEvent: a plain record
        _request([("", definition)]),  # no event name
        _request([("ray.task_lifecycle_event", definition)]),  # the wrong event name for its type
        _request([(name, "not an object")]),
        _request([(name, [definition])]),
        _request([(name, {**definition, "unknownField": 1})]),
        _request([(name, definition)], ids=(b"t" * 15, b"")),
        _request([(name, definition)], ids=(b"", b"s" * 9)),
        _request([(name, definition)], attributes={"bytes": b"\x00"}),  # taken: attributes are not read
    ):
        read = _checked(request)
        assert read in (-1, 1)
        if read == -1:
            request_message = ExportLogsServiceRequest.FromString(request)
            records = [
                r for rl in request_message.resource_logs for sl in rl.scope_logs for r in sl.log_records
            ]
            bad = 0
            for record in records:
                try:
                    ray_event_from_log_record(record)
                except NotARayEventError:
                    bad += 1
            assert bad or len(records[0].trace_id) not in (0, 16) or len(records[0].span_id) not in (0, 8)


def _with_text(text: bytes) -> list[bytes]:
    """Requests with `text` in each string field the Python path decodes (upb checks their UTF-8)."""
    definition = next(d for d in _fixture_dicts() if "taskDefinitionEvent" in d)
    name = to_log_record(decode_event(definition)).event_name
    marker = "\u2603MARK\u2603"
    bodies = [
        _request([(name, {**definition, "message": marker})]),
        _request([(name, definition)], attributes={"a": marker}),
        _request([(name, definition)], attributes={marker: 1}),
        _request([(name, definition)], attributes={"a": [{"b": marker}]}),
    ]
    request = ExportLogsServiceRequest.FromString(_request([(name, definition)]))
    request.resource_logs[0].scope_logs[0].scope.version = marker
    request.resource_logs[0].schema_url = marker
    bodies.append(request.SerializeToString())
    assert len(text) == len(marker.encode())  # the same length: the lengths around it stay right
    return [b.replace(marker.encode(), text) for b in bodies]


@needs_compiled
def test_text_that_is_not_utf8_is_left_to_protobuf() -> None:
    for body in _with_text(b"\xed\xa0\x80bad\xffxyz"):
        with pytest.raises(DecodeError):
            ExportLogsServiceRequest.FromString(body)
        assert ray_event_wires(body) is None
    for body in _with_text("fin\u00e9\U0001f600z".encode()):
        assert _checked(body) == 1


@needs_compiled
def test_cut_and_flipped_requests_are_read_the_same_or_left() -> None:
    rnd = random.Random(11)
    events = [decode_event(item) for item in _fixture_dicts()[:40]]
    whole = _of_events(events)
    taken = 0
    for _ in range(1500):
        data = bytearray(whole)
        if rnd.random() < 0.3:
            data = data[: rnd.randrange(len(data))]
        for _ in range(rnd.randint(1, 3)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        body = bytes(data)
        if ray_event_wires(body) is not None:
            taken += 1
            _checked(body)
    assert taken > 0


def test_the_python_path_reads_requests_with_the_compiled_helpers_off() -> None:
    code = (
        "from ray_otel_events.otel import to_ray_events\n"
        "print(to_ray_events._read_log_events is None, to_ray_events.ray_event_wires(b''))\n"
    )
    assert run_pure_python(code) == "True None"
