"""The RayEvent head reader and definition filter (native/_event_head.c: `head`, `slim`) against
their Python twins (otel/event_heads: python_head through upb, _kept_fields_python) on RayEvent
wire bytes that arrive without upb (forwarded between bridge workers, the durable queue's rows);
the first byte picks the entry point. A head is upb's head or None (left to upb); a slim definition
is the same bytes, or the same error."""

from __future__ import annotations

from typing import Any

import engine
import seeds
from google.protobuf.message import DecodeError
from known import (
    FIELD_NUMBERS,
    GROUPS,
    HEAD_PAYLOAD_UNREAD,
    SLIM_KEEPS,
    KeptWhatUpbDrops,
    ReadWhatUpbRefuses,
    RefusedWhatUpbReads,
)

from ray_otel_events.native import _event_head
from ray_otel_events.otel import event_heads, from_ray_events
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.test_compiled_helpers import _python_head

assert event_heads._compiled, "the compiled head reader is not bound: nothing would be compared"

HEAD, SLIM = 0, 1
DEFINITIONS = (from_ray_events.TaskDefinitionEvent, from_ray_events.ActorTaskDefinitionEvent)


def _kept(wire: bytes, cls: Any, compiled: bool) -> Any:
    saved, event_heads._compiled = event_heads._compiled, compiled
    try:
        return ("kept", event_heads.kept_fields(wire, cls, from_ray_events._TASK_SPAN_FIELDS[cls]))
    except (ValueError, DecodeError):
        return ("refused",)
    finally:
        event_heads._compiled = saved


def _without_unknown(cls: Any, wire: bytes) -> Any:
    message = cls.FromString(wire)
    message.DiscardUnknownFields()
    return message


def _same_head(head: Any, python: Any, event: RayEvent) -> bool:
    """The heads are equal, the payload as a message: upb writes a map's entries in its hash
    table's order, the compiled reader keeps the bytes as they came (the same message)."""
    if head == python:
        return True
    spec = event_heads._SPECS.get(event.event_type)
    if python is None or spec is None or head._replace(payload=b"") != python._replace(payload=b""):
        return False
    payload = getattr(event, spec.payload)
    try:
        return bool(type(payload).FromString(head.payload) == payload)
    except DecodeError:
        return False


def check(data: bytes) -> None:
    if not data:
        return
    mode, wire = data[0] % 2, data[1:]
    if mode == HEAD:
        head = _event_head.head(wire)
        if head is not None:
            try:
                event = RayEvent.FromString(wire)
            except DecodeError:
                raise ReadWhatUpbRefuses(wire) from None
            assert _same_head(head, _python_head(event), event)
        return
    for cls in DEFINITIONS:
        compiled, python = _kept(wire, cls, True), _kept(wire, cls, False)
        if python[0] != "kept" or compiled == python:
            continue  # the filter reads less than upb: it may keep what upb refuses
        if compiled[0] == "kept" and _without_unknown(cls, compiled[1]) == _without_unknown(cls, python[1]):
            raise KeptWhatUpbDrops(f"{compiled[1].hex()} != {python[1].hex()}")
        if compiled[0] == "refused":
            raise RefusedWhatUpbReads(wire.hex())
        raise AssertionError(f"{compiled} != {python}")


def _seeds() -> list[bytes]:
    out = []
    for event in seeds.events():
        out.append(bytes([HEAD]) + event.SerializeToString())
        for name in ("task_definition_event", "actor_task_definition_event"):
            if event.HasField(name):
                out.append(bytes([SLIM]) + getattr(event, name).SerializeToString())
    return out


if __name__ == "__main__":
    engine.main(check, _seeds, [GROUPS, FIELD_NUMBERS, HEAD_PAYLOAD_UNREAD, SLIM_KEEPS])
