"""The converter's compiled readers and core (native/_entity_spans.c: `transitions`, `task_parts`,
`Core.add`) against the Python twin (otel/from_ray_events with compiled=False, reading through upb),
fed bytes that arrive without upb: forwarded pieces (otel/posted_events.decode_pieces, whose compiled
reader native/_posted_events.c `read_pieces` is compared with its Python twin first: the same
events, or the same refusal) and lifecycle and definition payloads (which reach the payload readers
only from events upb or `checked_head` read whole: compared where upb reads them, and they must
not crash on the rest). The first byte picks the entry point. The same transitions, task parts,
spans, records, counters and open bytes."""

from __future__ import annotations

from typing import Any

import engine
import orjson
import seeds
from google.protobuf.message import DecodeError

from ray_otel_events.native import _entity_spans
from ray_otel_events.otel import from_ray_events, posted_events
from ray_otel_events.otel.from_ray_events import RayEventsToOtel
from ray_otel_events.otel.posted_events import decode_pieces, encode_pieces, read_posted_events
from tests.test_compiled_helpers import _parts_both_ways, _transitions_python
from tests.test_entity_spans import _Clock, _Counter, _seen

assert from_ray_events._compiled and posted_events._read_pieces is not None, "nothing would be compared"

TRANSITIONS, TASK_PARTS, PIECES = range(3)
KINDS = ("task", "actor")  # the lifecycle payload the bytes are read as
DEFINITIONS = (from_ray_events.TaskDefinitionEvent, from_ray_events.ActorTaskDefinitionEvent)


def _decoded(data: bytes, compiled: bool) -> Any:
    saved = posted_events._read_pieces
    if not compiled:
        posted_events._read_pieces = None
    try:
        return ("read", decode_pieces(data))
    except (ValueError, DecodeError):
        return ("refused",)
    finally:
        posted_events._read_pieces = saved


def _converted(parts: list[Any], compiled: bool, logs: bool, assemble: bool) -> list[Any]:
    clock = _Clock(100.0)
    converter = RayEventsToOtel(clock=clock, observed_clock_ns=_Counter(), compiled=compiled)
    seen = []
    try:
        seen.append(_seen(converter.add_parts(parts, logs, assemble), converter))
        clock.now += 700.0
        seen.append(_seen(converter.expire(), converter))
        seen.append(_seen(converter.flush(), converter))
    except (ValueError, DecodeError) as exc:  # both must fail alike
        seen.append(("raised", type(exc).__name__))
    return seen


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, flags, body = data[0] % 3, data[1], data[2:]
    if mode == TRANSITIONS:
        kind = KINDS[flags % 2]
        read = _entity_spans.transitions(body, kind)
        try:
            python = _transitions_python(body, kind)
        except DecodeError:
            return  # a payload reaches it only from an event upb or checked_head read whole
        # None hands the bytes back to upb (from_ray_events then reads them in Python), as it does
        # here for a Timestamp member of the wrong wire type, which upb keeps as an unknown field
        assert read is None or [(ns, state) for ns, state, _ in read] == python
    elif mode == TASK_PARTS:
        cut = int.from_bytes(body[:2], "little") % (len(body) + 1)
        definition = None if flags & 2 else body[2:cut]
        compiled, python = _parts_both_ways(definition, DEFINITIONS[flags % 2], body[cut:])
        assert compiled is None or python is None or compiled == python  # None: upb refuses, as above
    else:
        compiled, python = _decoded(body, True), _decoded(body, False)
        if compiled[0] == "read" and python[0] == "refused":
            raise engine.ReadWhatUpbRefuses(b"".join(parts.wire for parts in compiled[1]))
        assert compiled == python
        if compiled[0] == "read":
            logs, assemble = bool(flags & 1), not flags & 2
            assert engine.same(
                _converted(compiled[1], True, logs, assemble), _converted(compiled[1], False, logs, assemble)
            )


def _seeds() -> list[bytes]:
    out = []
    events = seeds.events()
    for event in events:
        for flag, name in enumerate(("task_lifecycle_event", "actor_lifecycle_event")):
            if event.HasField(name):
                out.append(bytes([TRANSITIONS, flag]) + getattr(event, name).SerializeToString())
    definitions = [
        e.task_definition_event.SerializeToString() for e in events if e.HasField("task_definition_event")
    ]
    lifecycles = [
        e.task_lifecycle_event.SerializeToString() for e in events if e.HasField("task_lifecycle_event")
    ]
    for definition, lifecycle in zip(definitions, lifecycles, strict=False):
        body = (len(definition) + 2).to_bytes(2, "little") + definition + lifecycle
        out.append(bytes([TASK_PARTS, 0]) + body)
    parts, _ = read_posted_events(orjson.dumps(seeds.event_dicts()))
    for start in range(0, len(parts), 3):  # a few events a message, as a worker forwards them
        flags = start % 4
        out.append(bytes([PIECES, flags]) + encode_pieces(parts[start : start + 3], records=bool(flags & 1)))
    return out


if __name__ == "__main__":
    engine.main(check, _seeds)
