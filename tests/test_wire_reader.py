"""The compiled protobuf wire reader (native/protobuf_wire.h) against upb: the same bytes refused
(field number 0 or above 2^29-1, wire types 6 and 7, an end tag with no group open, groups nested
too deep), unknown groups skipped as upb keeps them, and the compiled entry points never crash or
leave an exception half-raised on bytes that reach them without upb."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.otel import otlp_wire, plain_records
from tests.helpers.pure_python import needs_compiled

try:
    from ray_otel_events.native import _any_value_wire
except ImportError:
    _any_value_wire = None  # type: ignore[assignment]

compiled = needs_compiled(_any_value_wire, "the compiled wire readers")


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def group(number: int, body: bytes = b"") -> bytes:
    return key(number, 3) + body + key(number, 4)


def nested_groups(depth: int, number: int = 50) -> bytes:
    return key(number, 3) * depth + key(number, 4) * depth


STRING = field(1, b"kept")

# Bytes upb refuses, each after a valid AnyValue member.
REFUSED = {
    "field number 0": key(0, 0) + b"\x01",
    "field number 2^29": key(1 << 29, 0) + b"\x01",
    "field number 2^31": key(1 << 31, 2) + b"\x01z",
    "a key of six bytes": b"\x88\x80\x80\x80\x80\x00\x01",
    "wire type 6": key(9, 6),
    "wire type 7": key(9, 7),
    "an end tag with no group open": key(9, 4),
    "a group closed by another number": key(9, 3) + key(10, 4),
    "a group never closed": key(9, 3) + key(1, 0) + b"\x01",
    "a group holding wire type 7": group(9, key(3, 7)),
    "groups 101 deep": nested_groups(101),
}

# Bytes upb takes, keeping the groups as unknown fields.
ACCEPTED = {
    "a group": group(9, key(1, 0) + b"\x01"),
    "a group holding a string": group(9, field(2, b"\x80\xff")),
    "a group holding field number 0": group(9, key(0, 0) + b"\x01" + group(0)),
    "groups of one number nested": group(9, group(9, group(9, key(2, 5) + b"\x00\x00\x00\x00"))),
    "groups 100 deep": nested_groups(100),
    "the highest field number": key((1 << 29) - 1, 0) + b"\x01",
    "a key of five bytes": b"\x88\x80\x80\x80\x00\x01",
}


@pytest.mark.parametrize("tail", REFUSED.values(), ids=list(REFUSED))
def test_wire_upb_refuses_is_refused_by_the_compiled_reader(tail: bytes) -> None:
    with pytest.raises(DecodeError):
        AnyValue.FromString(STRING + tail)
    if _any_value_wire is not None:
        with pytest.raises(ValueError, match="malformed"):
            _any_value_wire.any_value(STRING + tail)


@pytest.mark.parametrize("tail", ACCEPTED.values(), ids=list(ACCEPTED))
def test_unknown_groups_are_skipped_as_upb_keeps_them(tail: bytes) -> None:
    message = AnyValue.FromString(STRING + tail)
    assert message.SerializeToString() == STRING + tail  # kept whole among the unknown fields
    expected = plain_records.any_value_to_python(message)
    assert expected == "kept"
    if _any_value_wire is not None:
        assert _any_value_wire.any_value(message.SerializeToString()) == expected
        assert _any_value_wire.any_value(tail + STRING) == expected


@compiled
def test_a_span_with_unknown_groups_reads_as_python_reads_it() -> None:
    span = Span(name="step", trace_id=b"t" * 16, span_id=b"s" * 8, start_time_unix_nano=5)
    span.attributes.add(key="k").value.string_value = "v"
    wire = span.SerializeToString() + group(99, field(1, b"x")) + group(9, b"")
    parsed = Span.FromString(wire)
    assert _any_value_wire.span_parts(wire) == _any_value_wire.span_parts(parsed.SerializeToString())
    assert tuple(plain_records.span_parts(parsed))[4] == "step"


@compiled
def test_text_that_is_not_utf8_raises_a_decode_error_not_a_system_error() -> None:
    # trace_state (3), name (5) and the status message both not UTF-8: only the first failure is raised
    wire = field(3, b"\xff") + field(5, b"\xfe") + field(15, field(2, b"\xfd"))
    with pytest.raises(UnicodeDecodeError):
        _any_value_wire.span_parts(wire)
    event = field(11, field(2, b"\xff"))
    with pytest.raises(UnicodeDecodeError):
        _any_value_wire.span_parts(event)
    link = field(13, field(3, b"\xff"))
    with pytest.raises(UnicodeDecodeError):
        _any_value_wire.span_parts(link)


@compiled
def test_a_field_number_past_2_to_the_31_in_a_function_descriptor_is_left_to_upb() -> None:
    """It once passed a signed bounds check and wrote outside a three-item array: run apart, so
    a crash fails the test instead of the run."""
    script = textwrap.dedent(
        """
        from ray_otel_events.native import _entity_spans
        from ray_otel_events.otel import from_ray_events  # binds the core's field numbers
        from tests.test_wire_reader import field, key, varint
        descriptor = field(2, field(1, b"module") + key(1 << 31, 2) + varint(1) + b"z")
        for number in (1 << 31, 1 << 32 | 1, (1 << 29)):
            bad = field(2, field(1, b"module") + key(number, 2) + varint(1) + b"z")
            print(_entity_spans.task_parts(field(5, bad), False, b""))
        print(_entity_spans.task_parts(field(5, descriptor), False, b""))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None"] * 4


def test_queued_envelopes_with_keys_upb_refuses_are_refused() -> None:
    item = field(1, b"") + field(2, field(1, b"") + field(2, b"span"))
    assert otlp_wire.merge_envelopes([item])
    for bad in (
        b"\x8a\x80\x80\x80\x80\x00" + item[1:],  # field 1 under a key of six bytes
        key(1 << 29, 2) + b"\x00",
        key(0, 2) + b"\x00",
        item[:-1],  # truncated
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a length of eleven bytes
    ):
        with pytest.raises(ValueError):
            otlp_wire.merge_envelopes([bad])


def _pieces(wire: bytes) -> bytes:
    """Forwarded pieces (posted_events.encode_pieces' form) of one event: its wire bytes, no body,
    no attributes."""
    return len(wire).to_bytes(4, "big") + wire + b"\xff\xff\xff\xff" + bytes(4)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_forwarded_pieces_with_wire_upb_refuses_are_a_value_error(pure: bool) -> None:
    """What a bridge worker takes from another answers 400 for bytes that are not a RayEvent."""
    script = textwrap.dedent(
        """
        from ray_otel_events.otel import posted_events
        from tests.test_wire_reader import REFUSED, _pieces, field
        print(posted_events._read_pieces is None)
        for tail in [*REFUSED.values(), field(1, b"x")[:-1]]:
            try:
                posted_events.decode_pieces(_pieces(field(1, b"AAAA") + tail))
            except ValueError as exc:
                print("ValueError" if "not a RayEvent" in str(exc) or "truncated" in str(exc) else exc)
        """
    )
    env = {**os.environ, "RAY_OTEL_EVENTS_PURE_PYTHON": "1" if pure else "0"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.split()
    assert lines[0] == str(pure or _any_value_wire is None)
    assert lines[1:] == ["ValueError"] * (len(REFUSED) + 1)
