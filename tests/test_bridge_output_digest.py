"""The converter's whole output on real Ray 2.60 POSTs (run E), byte for byte: spans, log records,
held pieces and counters, with the compiled helpers and without. The digest was taken before the
converter's per-event work was reorganised for speed (bridge-fast), so any change to what it writes
shows here, not only the changes the semantic tests look at."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from ray_otel_events.exporters.otlp import OtlpItemEncoder
from ray_otel_events.otel import otlp_wire
from ray_otel_events.otel.from_ray_events import Emitted, RayEventsToOtel
from ray_otel_events.otel.posted_events import read_posted_events
from tests.helpers.bridge_capture import run_e_bodies
from tests.helpers.pure_python import run_pure_python

# sha256 of `output_digest_text()` as main (932afbe) writes it.
DIGEST = "fd220ebbe502289053593d892fa3b5d31c3295178413707d2aa07c1ecbb63e7d"


class _Clock:
    """Reads `now`, which moves by `step` at each read."""

    def __init__(self, now: float, step: float) -> None:
        self.now, self.step = now, step

    def __call__(self) -> Any:
        self.now += self.step
        return self.now


def output_digest_text(items: OtlpItemEncoder | None = None) -> bytes:
    """Every POST twice (the second time duplicates) under two bounds: one roomy with a terminal
    grace, one that evicts; each run ends with expire() and flush(). `items`: the converter writes
    its spans and records in their envelopes (what a bridge queues); the text is of the spans and
    records themselves."""
    bodies = run_e_bodies()
    lines: list[bytes] = []
    envelope = items.envelope_of if items is not None else None
    for bounds in ({"terminal_grace_s": 0.25}, {"max_open_entities": 3, "max_open_bytes": 4000}):
        clock, observed = _Clock(0.0, 0.0), _Clock(1_795_000_000_000_000_000, 1)
        converter = RayEventsToOtel(
            clock=clock,
            observed_clock_ns=observed,
            envelope=envelope,
            **bounds,  # type: ignore[arg-type]
        )
        out = Emitted()
        for body in bodies + bodies:
            parts, _ = read_posted_events(body)  # as the bridge reads a POST
            out.extend(converter.add_parts(parts))
            clock.now += 0.1
            out.extend(converter.expire())
        clock.now += 1000.0
        out.extend(converter.expire())
        out.extend(converter.flush())
        if items is not None:
            for emitted in (*out.spans, *out.logs):
                prefix = items.envelope_of(emitted.session_name)
                assert emitted.item == otlp_wire.resource_logs(*prefix, [emitted.wire])
        lines += [
            b"span %s %d %s %s"
            % (s.session_name.encode(), s.event_type, s.entity.hex().encode(), s.wire.hex().encode())
            for s in out.spans
        ]
        lines += [
            b"log %s %d %s" % (r.session_name.encode(), r.event_type, r.wire.hex().encode()) for r in out.logs
        ]
        lines += [b"held %s %s" % (key.hex().encode(), parts.wire.hex().encode()) for key, parts in out.taken]
        lines.append(orjson.dumps(converter.counters.snapshot(), option=orjson.OPT_SORT_KEYS))
        lines.append(b"open %d %d" % (converter.open_entities, converter.open_bytes))
    return b"\n".join(lines)


def test_the_output_is_the_same_bytes_as_before() -> None:
    assert hashlib.sha256(output_digest_text()).hexdigest() == DIGEST


def test_spans_and_records_written_in_their_envelopes_are_the_same_bytes() -> None:
    assert hashlib.sha256(output_digest_text(OtlpItemEncoder("ray"))).hexdigest() == DIGEST


def test_the_pure_python_output_is_the_same_bytes() -> None:
    code = (
        "import hashlib, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from tests.test_bridge_output_digest import output_digest_text\n"
        "print(hashlib.sha256(output_digest_text()).hexdigest())\n"
    )
    assert run_pure_python(code) == DIGEST
