"""Defects the fuzzing found that are reported and not yet fixed, each with the signature of the
inputs that show it. A harness skips such an input (and counts it) instead of stopping, so that a
run goes on to find other defects. Temporary by design: when a fix lands, delete its entry here;
its reproducer in fuzz/regressions/ then replays as a plain input and must pass."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    defect: str
    shows: Callable[[bytes, BaseException], bool]  # (the harness's input, what it raised)
    # For a defect that kills the process (a sanitizer report): the inputs to skip before the run.
    crashes: Callable[[bytes], bool] | None = None


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    value = shift = 0
    while at < len(data) and shift < 70:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    return None


def fields(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(number, wire type, payload) of each field of `data` read as a protobuf message, as far as it
    reads; groups' start and end keys are given as fields of their own."""
    at = 0
    while at < len(data):
        key = _varint(data, at)
        if key is None:
            return
        number, wire_type, at = key[0] >> 3, key[0] & 7, key[1]
        if wire_type == 0:
            read = _varint(data, at)
            if read is None:
                return
            yield number, wire_type, b""
            at = read[1]
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            yield number, wire_type, data[at : at + size]
            at += size
        elif wire_type == 2:
            read = _varint(data, at)
            if read is None or read[1] + read[0] > len(data):
                return
            yield number, wire_type, data[read[1] : read[1] + read[0]]
            at = read[1] + read[0]
        elif wire_type in (3, 4):
            yield number, wire_type, b""
        else:
            return


def holds(data: bytes, test: Callable[[int, int], bool], depth: int = 0) -> bool:
    """Whether a field of `data`, or of a message nested in it (any length-delimited payload is
    tried as one), passes `test(number, wire_type)`."""
    if depth > 100:
        return False
    for number, wire_type, payload in fields(data):
        if test(number, wire_type):
            return True
        if wire_type == 2 and payload and holds(payload, test, depth + 1):
            return True
    return False


def _group(number: int, wire_type: int) -> bool:
    return wire_type in (3, 4)


def _refused_number(number: int, wire_type: int) -> bool:
    return number == 0 or number > (1 << 29) - 1


class ReadWhatUpbRefuses(AssertionError):
    """A compiled reader answered where upb refuses the bytes `wire`."""

    def __init__(self, wire: bytes) -> None:
        super().__init__(f"the compiled reader read bytes upb refuses: {wire.hex()}")
        self.wire = wire


class RefusedWhatUpbReads(AssertionError):
    """A compiled reader refused bytes upb reads."""


class KeptWhatUpbDrops(AssertionError):
    """The compiled answer is the Python one plus fields upb drops when it copies a message."""


GROUPS = Known(
    "the compiled readers (next_field, protobuf_wire.h) refuse an unknown field encoded as a group"
    " (wire types 3/4), which upb keeps: a valid OTLP request answered 500, a definition refused",
    lambda data, exc: isinstance(exc, (ValueError, RefusedWhatUpbReads)) and holds(data[1:], _group),
)
SYSTEM_ERROR = Known(
    '_any_value_wire.c builds results with Py_BuildValue("N...") after a failed UTF-8 decode left an'
    " exception set: SystemError where a ValueError (the bytes refused) is meant",
    lambda data, exc: isinstance(exc, SystemError),
)
FIELD_NUMBERS = Known(
    "next_field (protobuf_wire.h) takes field numbers upb refuses (0, above 2^29-1): the compiled"
    " readers read bytes upb refuses",
    lambda data, exc: isinstance(exc, ReadWhatUpbRefuses) and holds(exc.wire, _refused_number),
)


def _field_spans(wire: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(number, wire type, start, end) of each top-level field of `wire`, as far as it reads."""
    at = 0
    while at < len(wire):
        key = _varint(wire, at)
        if key is None:
            return
        number, wire_type, end = key[0] >> 3, key[0] & 7, key[1]
        if wire_type == 0:
            read = _varint(wire, end)
            if read is None:
                return
            end = read[1]
        elif wire_type in (1, 5):
            end += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            read = _varint(wire, end)
            if read is None:
                return
            end = read[1] + read[0]
        else:
            return
        if end > len(wire):
            return
        yield number, wire_type, at, end
        at = end


def _envelope_reads(wire: bytes) -> bool:
    """Whether every top-level field of `wire` reads (what upb refuses is then inside one: in a
    payload, or text that is not UTF-8)."""
    spans = list(_field_spans(wire))
    return bool(spans) and spans[-1][3] == len(wire)


HEAD_PAYLOAD_UNREAD = Known(
    "the head reader (_event_head.c head) checks only what the head needs: an event upb refuses"
    " for what lies inside a field (a group left open or a value cut short inside a transition, text"
    " that is not UTF-8 in a field it skips) gets a head, where the Python path refuses the event",
    lambda data, exc: isinstance(exc, ReadWhatUpbRefuses) and _envelope_reads(exc.wire),
)


def _forwarded_wires(data: bytes) -> list[bytes]:
    """The RayEvent wire bytes in entity_spans' input (its layout: mode byte, flags byte, payload),
    read by the Python readers only."""
    mode, body = data[0] % 3 if data else -1, data[2:]
    if mode == 1:  # TASK_PARTS: two bytes of cut, the definition, the lifecycle
        return [body[2:]]
    if mode == 2:  # PIECES
        from ray_otel_events.otel import posted_events

        saved, posted_events._read_pieces = posted_events._read_pieces, None
        try:
            return [parts.wire for parts in posted_events.decode_pieces(body)]
        except Exception:
            return []
        finally:
            posted_events._read_pieces = saved
    return [body]


STACK_WRITE = Known(
    "_entity_spans.c function_name indexes a 3-entry stack array with a field number of 2^31 or"
    " more (a sign conversion): a write out of bounds (UBSan stops it)",
    lambda data, exc: False,
    lambda data: any(holds(wire, lambda n, w: n >= 1 << 31) for wire in _forwarded_wires(data)),
)
EMPTY_OBJECT_NULL = Known(
    "_posted_events.c writes an empty nested object from a NULL buffer (memcpy from NULL, a zero"
    " offset applied to NULL in protobuf_wire.h put and emit_message): undefined behaviour UBSan"
    " stops on",
    lambda data, exc: False,
    lambda data: re.search(rb"(?<!\")\{\s*\}(?!\")", data) is not None,
)
SLIM_KEEPS = Known(
    "the definition filter (_event_head.c slim) keeps fields upb drops when it copies the kept"
    " fields: one written with its default value (an empty string, a zero) or one of another wire"
    " type than its own (an unknown field to upb); the slim bytes, and the open bytes counted, differ",
    lambda data, exc: isinstance(exc, KeptWhatUpbDrops),
)
