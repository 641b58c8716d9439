"""The forwarder's compiled pass over spool lines (native/_spool_lines.c `process`) against its
Python twin (`Forwarder._line`), on chunks of span and log record lines as other processes write
them to the spool (whole lines, the forwarder's chunks): the same trace and logs requests, byte for byte, and
the same counters (lines dropped as unreadable or invalid, spans left unmapped), and never a
failure: a line no span or RayEvent can be made of is dropped, not a sweep that fails."""

from __future__ import annotations

import engine

from ray_otel_events.tracing import forwarder
from tests.test_spool_lines import fixture_chunks, log_lines, ray_tasks, requests_of

assert forwarder._compiled, "the compiled pass is not bound: nothing would be compared"


def check(data: bytes) -> None:
    end = data.rfind(b"\n") + 1
    if end == 0:
        return
    chunk = data[:end]
    event_logs = len(chunk) % 7 != 0  # now and then the spans alone, no records
    compiled = requests_of(chunk, use_compiled=True, event_logs=event_logs)
    assert compiled == requests_of(chunk, use_compiled=False, event_logs=event_logs)


def _seeds() -> list[bytes]:
    chunks = list(fixture_chunks())
    lines = [line + b"\n" for chunk in chunks for line in chunk.splitlines()]
    logs = log_lines(3)  # log record lines: the compiled pass hands each back to its twin
    return [*chunks, ray_tasks(8), ray_tasks(2) + b"".join(logs), *lines, *logs]


if __name__ == "__main__":
    engine.main(check, _seeds)
