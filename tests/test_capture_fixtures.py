"""Every event real Ray 2.60 posted must parse into our RayEvent and re-encode to the same JSON.

Key order is compared too. The one thing Ray does not keep stable is the order of map entries:
json_format iterates the protobuf map container, whose order depends on how the event was parsed
(the capture's order came from Ray's own parse of the gRPC bytes). So against the capture, map
entries are compared sorted; against json_format on the same message, nothing is relaxed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

CAPTURES = Path(__file__).parent / "fixtures" / "ray-2.60"
SNAKE_CASE_BODY = CAPTURES / "raw" / "single_script_snake_case_post.body.json"


def _bodies() -> list[Path]:
    return sorted((CAPTURES / "raw").glob("post_*.body.json")) + sorted(
        (CAPTURES / "raw" / "runE").glob("*.body")
    )


def _per_type_files() -> list[Path]:
    return sorted(CAPTURES.glob("*_EVENT.json"))


def _events_of(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    if path.name.endswith("_EVENT.json"):
        return [item["event"] for item in data]
    assert isinstance(data, list)
    return data


def sort_map_entries(value: Any, descriptor: Descriptor, preserve: bool) -> Any:
    """``value`` with every protobuf map's entries sorted by key and everything else untouched."""
    if not isinstance(value, dict) or descriptor.full_name.startswith("google.protobuf."):
        return value
    by_key = {(f.name if preserve else f.json_name): f for f in descriptor.fields}
    out = {}
    for key, item in value.items():
        field = by_key[key]
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            out[key] = item
        elif field.message_type.GetOptions().map_entry:
            value_type = field.message_type.fields_by_name["value"].message_type
            out[key] = {
                k: sort_map_entries(v, value_type, preserve) if value_type else v
                for k, v in sorted(item.items())
            }
        elif field.is_repeated:
            out[key] = [sort_map_entries(v, field.message_type, preserve) for v in item]
        else:
            out[key] = sort_map_entries(item, field.message_type, preserve)
    return out


def check_event(captured: dict[str, Any], preserve: bool) -> None:
    message = json_format.ParseDict(captured, RayEvent())
    encoder = RayEventJsonEncoder(preserve_proto_field_name=preserve)
    ours = encoder.to_dict(message)
    # Exactly json_format's output for this message, map order included:
    theirs = json.loads(
        json_format.MessageToJson(
            message, always_print_fields_with_no_presence=True, preserving_proto_field_name=preserve
        )
    )
    assert json.dumps(ours) == json.dumps(theirs)
    # And what Ray posted, key order included (map entries sorted on both sides):
    descriptor = RayEvent.DESCRIPTOR
    assert json.dumps(sort_map_entries(ours, descriptor, preserve)) == json.dumps(
        sort_map_entries(captured, descriptor, preserve)
    )


@pytest.mark.parametrize("path", _per_type_files() + _bodies(), ids=lambda p: p.name)
def test_captured_camel_case_events_reencode_identically(path: Path) -> None:
    events = _events_of(path)
    assert events, f"{path} holds no events"
    for captured in events:
        check_event(captured, preserve=False)


def test_captured_snake_case_events_reencode_identically() -> None:
    events = _events_of(SNAKE_CASE_BODY)
    assert events and "event_id" in events[0]
    for captured in events:
        check_event(captured, preserve=True)


@pytest.mark.parametrize("path", _bodies(), ids=lambda p: p.name)
def test_captured_bodies_reencode_as_one_array_from_wire_bytes(path: Path) -> None:
    """The aggregator's path: wire-format events in, one JSON array out."""
    captured = _events_of(path)
    wires = [json_format.ParseDict(event, RayEvent()).SerializeToString() for event in captured]
    body = json.loads(RayEventJsonEncoder().encode_serialized(wires))
    descriptor = RayEvent.DESCRIPTOR
    assert [json.dumps(sort_map_entries(e, descriptor, False)) for e in body] == [
        json.dumps(sort_map_entries(e, descriptor, False)) for e in captured
    ]


def test_every_captured_event_type_is_covered() -> None:
    types = {event["eventType"] for path in _bodies() for event in _events_of(path)}
    types |= {path.stem for path in _per_type_files()}
    assert len(types) >= 12, sorted(types)
