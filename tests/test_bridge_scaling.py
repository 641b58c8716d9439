"""Scaling the RayEvent->OTLP bridge: `--workers 2` behind one port, and a convert tier feeding two
`--assemble-only` processes split by trace id (what the Collector's loadbalancing exporter does),
each giving the same spans as one process. Input: a real Ray 2.60 cluster's POSTs
(fixtures/bridge/runE) replayed under several session names, so that there are several traces."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
import requests
from helpers.agg_procs import read_jsonl
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
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from prometheus_client.parser import text_string_to_metric_families

from ray_otel_events.otel import otlp_json, semconv

SESSIONS = [f"session_2026-11-23_00-00-0{i}_000000_{i}" for i in range(4)]
EVENTS_PER_SESSION = 120  # RayEvents in runE
SPANS_PER_SESSION = 28  # 27 complete and the detached actor, flushed incomplete


def bodies() -> Iterator[bytes]:
    """Every runE POST, once per session (new event ids too): the sessions' traces interleave as a
    busy cluster's would."""
    for body in run_e_bodies():
        events = orjson.loads(body)
        for index, session in enumerate(SESSIONS):
            yield orjson.dumps(
                [{**e, "sessionName": session, "eventId": _event_id(e["eventId"], index)} for e in events]
            )


def _event_id(original: str, index: int) -> str:
    return base64.b64encode(bytes([index]) + base64.b64decode(original)).decode()


def post_all(bridge: Any) -> None:
    for body in bodies():  # a new connection each time: any worker may take it
        post_ray_events(bridge, body)


def span_view(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must not depend on how the work was split: ids, parents, times, status, events."""
    return sorted(
        (
            s["traceId"],
            s["spanId"],
            s.get("parentSpanId", ""),
            s["name"],
            s["startTimeUnixNano"],
            s["endTimeUnixNano"],
            s.get("status", {}).get("code", 0),
            bool(s["_attrs"].get(semconv.INCOMPLETE_ATTR)),
            tuple((e["name"], e["timeUnixNano"]) for e in s.get("events", [])),
        )
        for s in spans
    )


# Longer than the posting takes: every piece is in before a terminal entity's grace can end, and the
# stop flushes the rest. With 0.2 s a loaded machine let a grace end before the executor's piece came,
# so that span depended on the machine's speed, not on how the work was split.
GRACE_S = "60"

ACCEPTED = "ray_otel_events_ray_events_receiver_accepted_events_total"


def accepted_by_worker(exposition: str) -> dict[str, float]:
    """The bridge's accepted-RayEvents counter per `worker` label, from one /metrics scrape."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == ACCEPTED:
                worker = sample.labels.get("worker", "")
                found[worker] = found.get(worker, 0.0) + sample.value
    return found


def workers_in(exposition: str) -> set[str]:
    """The `worker` labels of every sample in one /metrics scrape."""
    return {
        sample.labels["worker"]
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if "worker" in sample.labels
    }


def run_full_bridge(
    tmp_path: Path, *extra: str, scrapes: list[str] | None = None
) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    (tmp_path).mkdir()
    with ServerGroup(tmp_path) as group:
        sink, sink_path = group.sink("otlp")
        bridge = group.bridge("--otlp-endpoint", url(sink), "--terminal-grace", GRACE_S, *extra)
        post_all(bridge)
        for _ in range(3 if scrapes is not None else 0):  # each scrape may land on either worker
            scrapes.append(requests.get(url(bridge, "/metrics"), timeout=30).text)  # type: ignore[union-attr]
        stats = bridge.stop()
        expected = SPANS_PER_SESSION * len(SESSIONS)
        spans = wait_until(lambda: otlp_spans(sink_path), expected)
        records = wait_until(lambda: otlp_log_records(sink_path), EVENTS_PER_SESSION * len(SESSIONS))
    return spans, len(records), stats


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    spans, records, _ = run_full_bridge(tmp_path_factory.mktemp("ref") / "one")
    assert len(spans) == SPANS_PER_SESSION * len(SESSIONS)
    assert records == EVENTS_PER_SESSION * len(SESSIONS)
    assert len({s["traceId"] for s in spans}) == len(SESSIONS)
    return spans


def test_two_workers_give_the_same_spans_as_one(reference: list[dict[str, Any]], tmp_path: Path) -> None:
    scrapes: list[str] = []
    spans, records, stats = run_full_bridge(tmp_path / "two", "--workers", "2", scrapes=scrapes)
    assert stats["workers"] == 2
    for exposition in scrapes:  # whichever worker answers, it speaks for both
        assert workers_in(exposition) == {"0", "1"}
        # (which worker accepts a connection is the kernel's choice: one may have taken every POST)
        accepted = accepted_by_worker(exposition)
        assert set(accepted) <= {"0", "1"}
        assert sum(accepted.values()) == EVENTS_PER_SESSION * len(SESSIONS)
        assert exposition.count(f"# TYPE {ACCEPTED} counter") == 1  # one family, not one per worker
    assert records == EVENTS_PER_SESSION * len(SESSIONS)  # every event's record, once
    assert span_view(spans) == span_view(reference)
    assert len(spans) == len({s["spanId"] for s in spans})  # each span assembled exactly once
    routed = sum(s["value"] for s in stats["router"]["forwarded_events"])
    assert 0 < routed < EVENTS_PER_SESSION * len(SESSIONS)  # both workers owned traces
    assert stats["open_entities"] == 0  # SIGTERM flushed both workers' open entities


def split_by_trace_id(request: ExportLogsServiceRequest, parts: int) -> list[ExportLogsServiceRequest]:
    """As the loadbalancing exporter routes by traceID (records without one go to the first)."""
    out = [ExportLogsServiceRequest() for _ in range(parts)]
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                owner = int.from_bytes(record.trace_id[:8], "big") % parts if record.trace_id else 0
                target = out[owner].resource_logs.add(resource=resource_logs.resource)
                target.scope_logs.add(scope=scope_logs.scope).log_records.append(record)
    return out


def test_convert_tier_and_two_assemblers_split_by_trace_id_give_the_same_spans(
    reference: list[dict[str, Any]], tmp_path: Path
) -> None:
    with ServerGroup(tmp_path) as group:
        logs_sink, logs_path = group.sink("logs")
        spans_sink, spans_path = group.sink("spans")
        convert = group.bridge("--convert-only", "--otlp-endpoint", url(logs_sink))
        assemblers = [
            group.bridge(
                "--assemble-only",
                "--grpc-port",
                "0",
                "--otlp-endpoint",
                url(spans_sink),
                "--terminal-grace",
                GRACE_S,
            )
            for _ in range(2)
        ]
        post_all(convert)
        convert_stats = convert.stop()
        records = wait_until(lambda: otlp_log_records(logs_path), EVENTS_PER_SESSION * len(SESSIONS))
        assert not otlp_spans(logs_path)  # convert makes no spans
        # The Collector's part: route each record to an assembler by trace id, over OTLP/gRPC.
        channels = [grpc.insecure_channel(a.addresses["grpc"]) for a in assemblers]
        try:
            for line in read_jsonl(logs_path):
                request = otlp_json.logs_request_from_json(line)
                for part, channel in zip(split_by_trace_id(request, 2), channels, strict=True):
                    if part.resource_logs:
                        reply = LogsServiceStub(channel).Export(part, timeout=30)
                        assert isinstance(reply, ExportLogsServiceResponse)
                        assert reply.partial_success.rejected_log_records == 0
        finally:
            for channel in channels:
                channel.close()
        assembler_stats = [a.stop() for a in assemblers]
        spans = wait_until(lambda: otlp_spans(spans_path), SPANS_PER_SESSION * len(SESSIONS))
    assert len(records) == EVENTS_PER_SESSION * len(SESSIONS)
    assert all(any_value(r["body"])["sessionName"] in SESSIONS for r in records)
    assert convert_stats["open_entities"] == 0 and "spans" not in convert_stats["ray_events_to_otel"]
    assert all(s["ray_events_to_otel"]["spans"] for s in assembler_stats)  # both assembled some
    assert not otlp_log_records(spans_path)  # assemblers add no second copy of the records
    assert span_view(spans) == span_view(reference)
