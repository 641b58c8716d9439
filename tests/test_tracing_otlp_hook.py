"""The OTLP hook exporting a traced pool's spans and event log records to real OTLP receivers on
127.0.0.1 (HTTP/protobuf and gRPC), with the OTel SDK's exporters as the clients."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.otlp_counting_receiver import OtlpReceiver, attributes_of, value_of
from helpers.tracing_procs import OTLP_HOOK, run_pool, script_env

from ray_otel_events.tracing.spool import forwarder_pid


def _spans(receiver: OtlpReceiver) -> list[tuple[dict[str, Any], Any]]:
    """(resource attributes, span) for every span received."""
    with receiver.lock:
        requests = list(receiver.traces)
    return [
        (attributes_of(rs.resource.attributes), span)
        for req in requests
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def _records(receiver: OtlpReceiver) -> list[tuple[dict[str, Any], Any]]:
    with receiver.lock:
        requests = list(receiver.logs)
    return [
        (attributes_of(rl.resource.attributes), rec)
        for req in requests
        for rl in req.resource_logs
        for sl in rl.scope_logs
        for rec in sl.log_records
    ]


@pytest.fixture
def receiver(protocol: str) -> Iterator[OtlpReceiver]:
    started = OtlpReceiver(protocol)
    yield started
    started.stop()


def _check(receiver: OtlpReceiver, summary: dict[str, Any]) -> None:
    spans = _spans(receiver)
    by_id = {span.span_id: (res, span) for res, span in spans}
    producers = [s for _, s in spans if s.name == "tracing_workload.square ray.remote"]
    consumers = [s for _, s in spans if s.name == "tracing_workload.square ray.remote_worker"]
    assert len(producers) == len(consumers) == 4
    for consumer in consumers:
        res_c, _ = by_id[consumer.span_id]
        res_p, producer = by_id[consumer.parent_span_id]
        assert producer.trace_id == consumer.trace_id and producer.kind == 4 and consumer.kind == 5
        assert res_p["service.name"] == res_c["service.name"] == "pool-under-test"
        assert res_c["deployment.environment"] == "test"
        assert attributes_of(consumer.attributes)["ray.pid"] != attributes_of(producer.attributes)["ray.pid"]
        # Their events travel as log records: the marker tells a bridge not to derive them again.
        for span in (producer, consumer):
            assert attributes_of(span.attributes)["ray_otel_events.producer"] == "task_event_span_processor"
    pids = {attributes_of(s.attributes)["ray.pid"] for _, s in spans if s.name.endswith("ray.remote_worker")}
    assert pids and str(summary["pid"]) not in pids
    # Log records: one per lifecycle event, in the context of its span.
    records = _records(receiver)
    assert records
    for _, record in records:
        _, span = by_id[record.span_id]
        assert record.trace_id == span.trace_id
        assert record.event_name.startswith("ray.") and record.time_unix_nano > 0
        body = value_of(record.body)
        assert body["eventType"].lower() == record.event_name.removeprefix("ray.")
    names = sorted({r.event_name for _, r in records})
    assert names == ["ray.task_definition_event", "ray.task_lifecycle_event"]
    lifecycle = [r for _, r in records if r.event_name == "ray.task_lifecycle_event"]
    # Per task (4 squares, 4 pid_of): PENDING_ARGS_AVAIL + SUBMITTED_TO_WORKER at the submit span's
    # end (one event), RUNNING at the execute span's start, FINISHED at its end.
    assert len(lifecycle) == 8 * 3
    transitions = [t for r in lifecycle for t in value_of(r.body)["taskLifecycleEvent"]["stateTransitions"]]
    assert len(transitions) == 8 * 4


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_otlp_hook_exports_spans_and_event_records(
    tmp_path: Path, protocol: str, receiver: OtlpReceiver
) -> None:
    env = script_env(
        tmp_path,
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_SERVICE_NAME": "pool-under-test",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
            "RAY_OTEL_EVENTS_SPOOL_DIR": str(tmp_path / "spool"),
            "RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS": "0.5",
        },
    )
    # The processes hand their spans to the spool; its forwarder sends them, after they are gone.
    summary, stderr = run_pool({"hook": OTLP_HOOK, "tasks": 4, "max_workers": 2}, env)
    assert summary["squares"] == [0, 1, 4, 9]
    deadline = time.monotonic() + 30
    while len(receiver.records) < 32 and time.monotonic() < deadline:  # 8 tasks, 4 records each
        time.sleep(0.05)
    _check(receiver, summary)
    folder = next((tmp_path / "spool").iterdir())
    while forwarder_pid(str(folder)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forwarder_pid(str(folder)) is None, "the forwarder exits once everything is sent"
    assert "Traceback" not in stderr, stderr
    if protocol == "http/protobuf":
        assert set(receiver.paths) == {"/v1/traces", "/v1/logs"}
        assert receiver.content_types == {"application/x-protobuf"}
    assert not list(tmp_path.glob("*.json")), "the OTLP hook writes no span files"
