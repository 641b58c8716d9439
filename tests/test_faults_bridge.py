"""The bridge with --queue-dir under kill -9: a real Ray cluster's POSTs (fixtures/bridge/runE),
half before the kill and half after the restart, give the same spans and every event's log record
as an undisturbed run."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from helpers.agg_procs import free_port, metric_total
from helpers.agg_procs import wait_until as wait_for_condition
from helpers.bridge_capture import run_e_bodies
from helpers.bridge_procs import (
    ServerGroup,
    any_value,
    otlp_log_records,
    otlp_spans,
    post_ray_events,
    url,
    wait_until,
)

from ray_otel_events.otel import semconv


def post_all(bridge: Any, bodies: list[bytes]) -> None:
    for body in bodies:
        post_ray_events(bridge, body)


def event_ids(records: list[dict[str, Any]]) -> list[str]:
    return [str(any_value(r["body"])["eventId"]) for r in records]


def span_view(spans: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        (
            s["spanId"],
            s.get("parentSpanId", ""),
            s["name"],
            s["startTimeUnixNano"],
            s["endTimeUnixNano"],
            s.get("status", {}).get("code", 0),
            tuple(e["name"] for e in s.get("events", [])),
        )
        for s in spans
        if not s["_attrs"].get(semconv.INCOMPLETE_ATTR)
    }


def test_kill_9_of_a_durable_bridge_mid_stream(tmp_path: Path) -> None:
    bodies = run_e_bodies()
    half = len(bodies) // 2
    for name in ("reference", "durable"):
        (tmp_path / name).mkdir()
    with ServerGroup(tmp_path / "reference") as group:
        ref_sink, ref_path = group.sink("otlp")
        events_sink, _ = group.sink("events")
        bridge = group.bridge(
            "--export-addr", url(events_sink), "--otlp-endpoint", url(ref_sink), "--terminal-grace", "0.2"
        )
        post_all(bridge, bodies)
        wait_until(lambda: otlp_spans(ref_path), 27)
        bridge.stop()
        reference_spans = span_view(otlp_spans(ref_path))
        reference_ids = event_ids(otlp_log_records(ref_path))
    assert len(reference_spans) == 27 and len(set(reference_ids)) == len(reference_ids) == 120

    port = free_port()
    queue = tmp_path / "queue"
    with ServerGroup(tmp_path / "durable") as group:
        events_sink, _ = group.sink("events")
        args = (
            "--export-addr",
            url(events_sink),
            "--otlp-endpoint",
            f"http://127.0.0.1:{port}",
            "--terminal-grace",
            "0.2",
            "--queue-dir",
            str(queue),
        )
        first = group.bridge(*args)
        post_all(first, bodies[:half])  # accepted while the OTLP destination is down
        # some spans complete, and wait on disk (the bridge is durable) for the destination, down
        wait_for_condition(
            lambda: (
                metric_total(first.port, "ray_otel_events_assembler_spans_total") > 0
                and metric_total(first.port, "ray_otel_events_publisher_failed_attempts_total") > 0
            ),
            "completed spans the bridge failed to send",
        )
        first.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        _otlp_sink, otlp_path = group.sink("otlp", "--port", str(port))
        second = group.bridge(*args)
        post_all(second, bodies[half:])
        wait_until(lambda: span_view(otlp_spans(otlp_path)), 27)
        wait_until(lambda: otlp_log_records(otlp_path), 120)
        stats = second.stop()
        spans = span_view(otlp_spans(otlp_path))
        ids = event_ids(otlp_log_records(otlp_path))
    assert spans == reference_spans
    assert set(ids) == set(reference_ids)  # every accepted event's record, at least once
    assert stats["open_entities"] == 1  # the detached actor, kept on disk for the next start
