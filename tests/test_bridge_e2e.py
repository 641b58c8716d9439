"""The bridge process between real clients and real sink processes.

OTLP in: the OpenTelemetry SDK's own OTLP/HTTP exporters (protobuf) and OTLP/JSON requests (the SDK's
JSON exporter is not installable from this index; the JSON is our spec encoding of the SDK's own
request). RayEvents in: every POST body of a real Ray 2.60 workload, replayed.
"""

from __future__ import annotations

import gzip
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from google.protobuf import json_format
from helpers.agg_procs import read_jsonl, refused_by_cli
from helpers.bridge_capture import run_e_bodies, run_e_events
from helpers.bridge_procs import ServerGroup, otlp_log_records, otlp_spans, post_ray_events, url, wait_until
from helpers.otlp_logs import emit_ray_events
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.otel import otlp_json, semconv
from ray_otel_events.otel.from_ray_events import trace_id_for_job
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

SESSION = "session_2026-11-22_01-37-25_288381_8892"
ENCODER = RayEventJsonEncoder()


class Stack:
    def __init__(self, group: ServerGroup) -> None:
        self.events_sink, self.events_path = group.sink("events")
        self.records_sink, self.records_path = group.sink("records")
        self.otlp_sink, self.otlp_path = group.sink("otlp")
        self.bridge = group.bridge(
            "--export-addr",
            url(self.events_sink, "/ray-events"),
            "--spans-export-addr",
            url(self.records_sink, "/records"),
            "--otlp-endpoint",
            url(self.otlp_sink),
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with ServerGroup(tmp_path_factory.mktemp("bridge")) as group:
        yield Stack(group)


def _tracer(marker: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "test.marker": marker}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _ray_worker_span(provider: TracerProvider, task_hex: str, fail: bool = False) -> None:
    attrs = {
        semconv.RAY_REMOTE: "function",
        semconv.RAY_FUNCTION: "__main__.leaf",
        semconv.RAY_PID: "4242",
        semconv.RAY_JOB_ID: "01000000",
        semconv.RAY_TASK_ID: task_hex,
        semconv.RAY_NODE_ID: "d8" * 28,
        semconv.RAY_WORKER_ID: "19" * 28,
    }
    tracer = provider.get_tracer("ray")
    with tracer.start_as_current_span(
        "__main__.leaf ray.remote_worker", kind=SpanKind.CONSUMER, attributes=attrs
    ) as s:
        if fail:
            s.set_status(Status(StatusCode.ERROR, "ValueError: traced failure"))


def _sent_spans(marker: str) -> list[ReadableSpan]:
    provider, memory = _tracer(marker)
    tracer = provider.get_tracer("app", "1.2")
    with tracer.start_as_current_span(
        "plain-parent", kind=SpanKind.SERVER, attributes={"http.route": "/x"}
    ) as parent:
        parent.add_event("checkpoint", {"n": 3})
        with tracer.start_as_current_span("plain-child"):
            pass
    _ray_worker_span(provider, "16310a0f0a45af5c" + "ff" * 12 + "01000000")
    _ray_worker_span(provider, "c2668a65bda616c1" + "ff" * 12 + "01000000", fail=True)
    with tracer.start_as_current_span(
        "ours ray.remote_worker",
        kind=SpanKind.CONSUMER,
        attributes={
            semconv.RAY_REMOTE: "function",
            semconv.RAY_JOB_ID: "01000000",
            semconv.PRODUCER_ATTR: "hook",
        },
    ):
        pass
    return list(memory.get_finished_spans())


def _records_with(stack: Stack, marker: str, n: int) -> list[dict[str, Any]]:
    return wait_until(
        lambda: [
            r for r in read_jsonl(stack.records_path) if r.get("resource", {}).get("test.marker") == marker
        ],
        n,
    )


def _events_of_job_tasks(stack: Stack, task_ids_b64: set[str], n: int) -> list[dict[str, Any]]:
    def read() -> list[dict[str, Any]]:
        out = []
        for event in read_jsonl(stack.events_path):
            payload = event.get("taskLifecycleEvent") or event.get("taskDefinitionEvent") or {}
            if payload.get("taskId") in task_ids_b64:
                out.append(event)
        return out

    return wait_until(read, n)


def _check_span_outcomes(stack: Stack, spans: list[ReadableSpan], marker: str) -> None:
    records = _records_with(stack, marker, 3)
    by_name = {r["name"]: r for r in records}
    assert set(by_name) == {"plain-parent", "plain-child", "ours ray.remote_worker"}  # ours: never RayEvents
    parent = by_name["plain-parent"]
    sent = {s.name: s for s in spans}
    assert parent["signal"] == "span" and parent["kind"] == "SERVER"
    assert parent["traceId"] == format(sent["plain-parent"].context.trace_id, "032x")
    assert parent["spanId"] == format(sent["plain-parent"].context.span_id, "016x")
    assert by_name["plain-child"]["parentSpanId"] == parent["spanId"]
    assert parent["attributes"] == {"http.route": "/x"}
    assert parent["events"][0]["name"] == "checkpoint" and parent["events"][0]["attributes"] == {"n": 3}
    assert parent["startTimeUnixNano"] == sent["plain-parent"].start_time
    assert parent["resource"]["service.name"] == "svc" and parent["scope"] == {
        "name": "app",
        "version": "1.2",
    }
    # Ray's worker spans became RayEvents, posted exactly as the aggregator posts them.
    ray_spans = [s for s in spans if s.name.endswith(" ray.remote_worker") and "ours" not in s.name]
    assert len(ray_spans) == 2


def _task_events(stack: Stack, before: int) -> list[dict[str, Any]]:
    return read_jsonl(stack.events_path)[before:]


def test_sdk_protobuf_span_exporter(stack: Stack) -> None:
    marker = uuid.uuid4().hex
    before = len(read_jsonl(stack.events_path))
    spans = _sent_spans(marker)
    exporter = OTLPSpanExporter(endpoint=url(stack.bridge, "/v1/traces"))
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    _check_span_outcomes(stack, spans, marker)
    events = wait_until(lambda: _task_events(stack, before), 2)
    lifecycles = [e for e in events if e["eventType"] == "TASK_LIFECYCLE_EVENT"]
    assert len(lifecycles) == 2
    states = sorted(
        tuple(t["state"] for t in e["taskLifecycleEvent"]["stateTransitions"]) for e in lifecycles
    )
    assert states == [("RUNNING", "FAILED"), ("RUNNING", "FINISHED")]
    failed = next(
        e for e in lifecycles if e["taskLifecycleEvent"]["stateTransitions"][-1]["state"] == "FAILED"
    )
    assert failed["taskLifecycleEvent"]["rayErrorInfo"]["errorType"] == "TASK_EXECUTION_EXCEPTION"
    assert failed["taskLifecycleEvent"]["workerPid"] == 4242
    for event in events:  # the aggregator's exact JSON form: camelCase, base64 ids, enum names
        assert event == ENCODER.to_dict(json_format.ParseDict(event, RayEvent()))
        assert len(event["eventId"]) == 40  # 28 bytes, base64


def test_otlp_json_client_plain_and_gzip(stack: Stack) -> None:
    for gzipped in (False, True):
        marker = uuid.uuid4().hex
        spans = _sent_spans(marker)
        body = orjson.dumps(otlp_json.to_json(encode_spans(spans)))
        headers = {"Content-Type": "application/json"}
        if gzipped:
            body, headers = gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
        response = requests.post(url(stack.bridge, "/v1/traces"), data=body, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.json() == {}  # what a Collector's otlp_http exporter needs to see
        _check_span_outcomes(stack, spans, marker)


def test_protobuf_response_is_an_empty_message(stack: Stack) -> None:
    body = encode_spans(_sent_spans(uuid.uuid4().hex)).SerializeToString()
    response = requests.post(
        url(stack.bridge, "/v1/traces"),
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()


def test_sdk_log_exporter_ray_events_exactly_and_other_logs_as_records(stack: Stack) -> None:
    marker = uuid.uuid4().hex
    events = run_e_events()[:40]
    wanted = {e["eventId"] for e in (ENCODER.to_dict(ev) for ev in events)}
    provider = LoggerProvider(resource=Resource.create({"test.marker": marker}))
    exporter = OTLPLogExporter(endpoint=url(stack.bridge, "/v1/logs"))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("ray_otel_events")
    emit_ray_events(logger, events)
    logger.emit(body="just a log line", attributes={"k": "v"}, event_name="app.thing", timestamp=123)
    provider.shutdown()
    received = wait_until(
        lambda: [e for e in read_jsonl(stack.events_path) if e["eventId"] in wanted], len(events)
    )
    assert sorted(received, key=lambda e: e["eventId"]) == sorted(
        (ENCODER.to_dict(e) for e in events), key=lambda e: e["eventId"]
    )
    (record,) = _records_with(stack, marker, 1)
    assert record["signal"] == "log" and record["body"] == "just a log line"
    assert record["eventName"] == "app.thing" and record["attributes"] == {"k": "v"}
    assert record["timeUnixNano"] == 123


def test_ray_events_replay_becomes_one_trace_at_an_otlp_sink(tmp_path: Path) -> None:
    with ServerGroup(tmp_path) as group:
        otlp_sink, otlp_path = group.sink("otlp")
        events_sink, _ = group.sink("events")
        bridge = group.bridge(
            "--export-addr", url(events_sink), "--otlp-endpoint", url(otlp_sink), "--terminal-grace", "0.2"
        )
        for body in run_e_bodies():
            post_ray_events(bridge, body)
        # Complete spans go out while the bridge runs; only the detached actor is still open.
        assert len(wait_until(lambda: otlp_spans(otlp_path), 27)) == 27
        stats = bridge.stop()  # SIGTERM: the open actor is flushed as an incomplete span
        spans = otlp_spans(otlp_path)
        records = wait_until(lambda: otlp_log_records(otlp_path), 120)
    assert stats["open_entities"] == 0
    assert len(spans) == 28 and len(records) == 120
    assert {s["traceId"] for s in spans} == {trace_id_for_job(SESSION, bytes.fromhex("01000000")).hex()}
    assert all(
        s["_resource"]["ray.session_name"] == SESSION and s["_resource"]["service.name"] == "ray"
        for s in spans
    )
    span_ids = {s["spanId"] for s in spans}
    assert [s["name"] for s in spans if "parentSpanId" not in s] == ["job python workload.py"]
    assert all(s.get("parentSpanId", "") in span_ids | {""} for s in spans)
    named: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        named.setdefault(span["name"], []).append(span)
    (parent,) = named["parent"]
    assert all(child["parentSpanId"] == parent["spanId"] for child in named["child"])
    (boom,) = named["boom"]
    assert boom["status"]["code"] == 2 and boom["status"]["message"].startswith("ValueError")
    assert [e["name"] for e in boom["events"]][-2:] == ["FAILED", "exception"]
    assert int(boom["startTimeUnixNano"]) == int(boom["events"][0]["timeUnixNano"])
    assert int(boom["endTimeUnixNano"]) == int(boom["events"][-2]["timeUnixNano"])
    assert boom["_attrs"][semconv.RAY_TASK_ATTEMPT] == 0 and len(boom["_attrs"][semconv.RAY_TASK_ID]) == 48
    incomplete = [s for s in spans if s["_attrs"].get(semconv.INCOMPLETE_ATTR)]
    assert [s["_attrs"].get("ray.actor_name") for s in incomplete] == ["detached_counter"]
    with_trace = [r for r in records if r.get("traceId")]
    assert all(r["spanId"] in span_ids for r in with_trace)
    assert {r["eventName"] for r in records if not r.get("traceId")} == {
        "ray.node_definition_event",
        "ray.node_lifecycle_event",
        "ray.worker_definition_event",
        "ray.worker_lifecycle_event",
    }


def test_without_spans_addr_other_telemetry_is_counted_and_dropped(tmp_path: Path) -> None:
    with ServerGroup(tmp_path) as group:
        events_sink, events_path = group.sink("events")
        bridge = group.bridge("--export-addr", url(events_sink), "--otlp-endpoint", url(events_sink))
        body = encode_spans(_sent_spans(uuid.uuid4().hex)).SerializeToString()
        response = requests.post(
            url(bridge, "/v1/traces"),
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert response.status_code == 200
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        assert partial.rejected_spans == 0  # accepted and deliberately dropped: a warning, not a rejection
        assert "3 spans that are not Ray data were dropped" in partial.error_message
        events = wait_until(lambda: read_jsonl(events_path), 2)
        stats = bridge.stop()
    assert len(events) == 2 and all("eventType" in e for e in events)  # only RayEvents reach it
    dropped = stats["bridge"]["plain_records_dropped"]
    assert dropped == [{"labels": {"signal": "span"}, "value": 3}]


def test_bridge_cli_rejects_bad_configuration() -> None:
    assert "--export-addr='ftp://x'" in refused_by_cli("bridge", "--export-addr", "ftp://x").stderr
