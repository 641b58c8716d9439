"""The OTLP hook exporting a traced pool's spans and event log records to real OTLP receivers on
127.0.0.1 (HTTP/protobuf and gRPC), with the OTel SDK's exporters as the clients."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from helpers.tracing_procs import OTLP_HOOK, run_pool, script_env
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from ray_otel_events.tracing.spool import forwarder_pid


class Received:
    def __init__(self) -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.logs: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        return [
            (_attrs(rs.resource.attributes), span)
            for req in self.traces
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def records(self) -> list[tuple[dict[str, Any], Any]]:
        return [
            (_attrs(rl.resource.attributes), rec)
            for req in self.logs
            for rl in req.resource_logs
            for sl in rl.scope_logs
            for rec in sl.log_records
        ]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@pytest.fixture
def http_receiver() -> Iterator[tuple[Received, str]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.headers["Content-Type"] == "application/x-protobuf"
            if self.path == "/v1/traces":
                request: Any = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                reply: Any = trace_service_pb2.ExportTraceServiceResponse()
                target = received.traces
            elif self.path == "/v1/logs":
                request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
                reply = logs_service_pb2.ExportLogsServiceResponse()
                target = received.logs
            else:
                self.send_error(404)
                return
            with received.lock:
                target.append(request)
                received.paths.append(self.path)
            payload = reply.SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[Received, str]]:
    received = Received()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            with received.lock:
                received.traces.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            with received.lock:
                received.logs.append(request)
            return logs_service_pb2.ExportLogsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield received, f"http://127.0.0.1:{port}"
    server.stop(None)


def _check(received: Received, summary: dict[str, Any]) -> None:
    spans = received.spans()
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
        assert _attrs(consumer.attributes)["ray.pid"] != _attrs(producer.attributes)["ray.pid"]
        # Their events travel as log records: the marker tells a bridge not to derive them again.
        for span in (producer, consumer):
            assert _attrs(span.attributes)["ray_otel_events.producer"] == "task_event_span_processor"
    pids = {_attrs(s.attributes)["ray.pid"] for _, s in spans if s.name.endswith("ray.remote_worker")}
    assert pids and str(summary["pid"]) not in pids
    # Log records: one per lifecycle event, in the context of its span.
    records = received.records()
    assert records
    for _, record in records:
        _, span = by_id[record.span_id]
        assert record.trace_id == span.trace_id
        assert record.event_name.startswith("ray.") and record.time_unix_nano > 0
        body = _value(record.body)
        assert body["eventType"].lower() == record.event_name.removeprefix("ray.")
    names = sorted({r.event_name for _, r in records})
    assert names == ["ray.task_definition_event", "ray.task_lifecycle_event"]
    lifecycle = [r for _, r in records if r.event_name == "ray.task_lifecycle_event"]
    # Per task (4 squares, 4 pid_of): PENDING_ARGS_AVAIL + SUBMITTED_TO_WORKER at the submit span's
    # end (one event), RUNNING at the execute span's start, FINISHED at its end.
    assert len(lifecycle) == 8 * 3
    transitions = [t for r in lifecycle for t in _value(r.body)["taskLifecycleEvent"]["stateTransitions"]]
    assert len(transitions) == 8 * 4


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_otlp_hook_exports_spans_and_event_records(
    tmp_path: Path,
    protocol: str,
    http_receiver: tuple[Received, str],
    grpc_receiver: tuple[Received, str],
) -> None:
    received, endpoint = http_receiver if protocol == "http/protobuf" else grpc_receiver
    env = script_env(
        tmp_path,
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
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
    while len(received.records()) < 32 and time.monotonic() < deadline:  # 8 tasks, 4 records each
        time.sleep(0.05)
    _check(received, summary)
    folder = next((tmp_path / "spool").iterdir())
    while forwarder_pid(str(folder)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forwarder_pid(str(folder)) is None, "the forwarder exits once everything is sent"
    assert "Traceback" not in stderr, stderr
    if protocol == "http/protobuf":
        assert set(received.paths) == {"/v1/traces", "/v1/logs"}
    assert not list(tmp_path.glob("*.json")), "the OTLP hook writes no span files"
