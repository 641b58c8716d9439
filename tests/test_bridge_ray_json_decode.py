"""The fast RayEvent JSON decoder returns exactly what json_format.ParseDict returns, or raises as it does."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.protobuf import json_format
from helpers.bridge_capture import run_e_events
from test_bridge_round_trip import every_type_events

import ray_otel_events.encoding.ray_json_decode as decoder
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.encoding.ray_json_decode import decode_event
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

ENCODERS = [RayEventJsonEncoder(), RayEventJsonEncoder(preserve_proto_field_name=True)]


def _reference(obj: Any, ignore_unknown_fields: bool = False) -> RayEvent:
    return json_format.ParseDict(obj, RayEvent(), ignore_unknown_fields=ignore_unknown_fields)


@pytest.mark.parametrize("encoder", ENCODERS, ids=["camelCase", "proto_names"])
def test_same_as_json_format_for_every_type_and_the_captures(encoder: RayEventJsonEncoder) -> None:
    for event in every_type_events() + run_e_events():
        obj = encoder.to_dict(event)
        decoded = decode_event(obj)
        assert decoded == _reference(obj) == event


def test_ray_shaped_input_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = [RayEventJsonEncoder().to_dict(e) for e in every_type_events() + run_e_events()]

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("fell back to json_format")

    monkeypatch.setattr(decoder.json_format, "ParseDict", forbidden)
    for obj in objs:
        decode_event(obj)


def _mutations() -> list[tuple[str, Any]]:
    base = RayEventJsonEncoder().to_dict(run_e_events()[5])  # a TASK_DEFINITION or lifecycle event
    cases: list[tuple[str, Any]] = []

    def case(name: str, change: Any) -> None:
        obj = copy.deepcopy(base)
        change(obj)
        cases.append((name, obj))

    case("timestamp with an offset", lambda o: o.update(timestamp="2026-11-22T02:37:29.5+01:00"))
    case("timestamp lower case", lambda o: o.update(timestamp="2026-11-22t01:37:29z"))
    case("timestamp invalid day", lambda o: o.update(timestamp="2026-02-30T00:00:00Z"))
    case("enum as a number", lambda o: o.update(severity=17))
    case("enum as text number", lambda o: o.update(severity="3"))
    case("unknown enum name", lambda o: o.update(severity="LOUD"))
    case("urlsafe base64 without padding", lambda o: o.update(eventId="-_-_"))
    case("base64 with junk", lambda o: o.update(eventId="ab$d"))
    case("int as float", lambda o: o.update(sessionName=1.0))
    case("unknown field", lambda o: o.update(brandNew={"x": 1}))
    case("null value", lambda o: o.update(message=None))
    case("both names of a field", lambda o: o.update(session_name="other"))
    case("not an object", lambda o: o.update(timestamp=["x"]))
    two_functions = {
        "pythonFunctionDescriptor": {"moduleName": "m", "functionName": "f"},
        "javaFunctionDescriptor": {"className": "C", "functionName": "f"},
    }
    case(
        "two members of one oneof",
        lambda o: o.update(
            eventType="TASK_DEFINITION_EVENT", taskDefinitionEvent={"taskFunc": two_functions}
        ),
    )
    return cases


@pytest.mark.parametrize("ignore_unknown_fields", [False, True])
@pytest.mark.parametrize(("name", "obj"), _mutations(), ids=[name for name, _ in _mutations()])
def test_unusual_input_gets_json_formats_answer(name: str, obj: Any, ignore_unknown_fields: bool) -> None:
    try:
        expected = _reference(obj, ignore_unknown_fields)
    except json_format.ParseError as exc:
        with pytest.raises(json_format.ParseError) as info:
            decode_event(obj, ignore_unknown_fields)
        assert str(info.value) == str(exc)
        return
    assert decode_event(obj, ignore_unknown_fields) == expected


def test_numbers_in_all_forms() -> None:
    encoder = RayEventJsonEncoder()
    obj = next(encoder.to_dict(e) for e in run_e_events() if e.HasField("task_lifecycle_event"))
    for value in (0, "0", 3, "3", 3.0, "-1", 2**31):
        obj["taskLifecycleEvent"]["taskAttempt"] = value
        _decodes_as_json_format_does(obj)


def _decodes_as_json_format_does(obj: Any) -> None:
    try:
        expected = _reference(obj)
    except json_format.ParseError:
        with pytest.raises(json_format.ParseError):
            decode_event(obj)
        return
    assert decode_event(obj) == expected


def test_values_read_before_are_still_checked_in_full() -> None:
    """Ids and timestamps' seconds are kept once read: a value sharing a kept prefix, or a kept
    id in a field where it is wrong, gets json_format's answer all the same."""
    base = RayEventJsonEncoder().to_dict(run_e_events()[5])
    decode_event(base)  # keeps its id and its timestamp's seconds
    seconds = base["timestamp"][:19]
    for stamp in ("Z", ".5Z", ".123456789Z", ".1234567890Z", ".Z", "Z ", ".5+01:00", ".5z", ".٣Z"):
        obj = copy.deepcopy(base)
        obj["timestamp"] = seconds + stamp
        _decodes_as_json_format_does(obj)
    obj = copy.deepcopy(base)
    obj["sessionName"] = base["eventId"]  # a kept base64 id, in a string field: stays a string
    assert decode_event(obj) == _reference(obj)
