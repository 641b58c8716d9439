"""A counting OTLP receiver for tests: HTTP/protobuf (`/v1/traces`, `/v1/logs`, gzipped or not) and
gRPC, on 127.0.0.1 port 0; it parses every request with the generated protobuf classes and keeps
the requests, their spans and log records, and (HTTP) each request's path and Content-Type.
`up=False` starts it refusing connections (the port is reserved, nothing listens) until `start()`."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from helpers.agg_procs import free_port


def value_of(v: AnyValue) -> Any:
    """An OTLP AnyValue as Python: lists and dicts for arrays and key-value lists, None when unset."""
    kind = v.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes_of(kvs: Any) -> dict[str, Any]:
    """Repeated KeyValue (attributes, a resource's) as a dict."""
    return {kv.key: value_of(kv.value) for kv in kvs}


class OtlpReceiver:
    def __init__(self, protocol: str = "http/protobuf", *, up: bool = True) -> None:
        self.protocol = protocol
        self.port = free_port()
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.logs: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.spans: list[Any] = []
        self.records: list[Any] = []
        self.paths: list[str] = []
        self.content_types: set[str] = set()
        self.lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        if up:
            self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            self.traces.append(request)
            self.spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)

    def _add_logs(self, request: logs_service_pb2.ExportLogsServiceRequest) -> None:
        with self.lock:
            self.logs.append(request)
            self.records.extend(
                r for rl in request.resource_logs for sl in rl.scope_logs for r in sl.log_records
            )

    def start(self) -> None:
        if self.protocol == "grpc":
            self._start_grpc()
        else:
            self._start_http()

    def _start_http(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.lock:
                    receiver.paths.append(self.path)
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                if self.path == "/v1/traces":
                    receiver._add_traces(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                elif self.path == "/v1/logs":
                    receiver._add_logs(logs_service_pb2.ExportLogsServiceRequest.FromString(body))
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def _start_grpc(self) -> None:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._add_logs(request)
                return logs_service_pb2.ExportLogsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
        server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        self._grpc = server

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(None)
            self._grpc = None

    def wait_for(self, done: Callable[[OtlpReceiver], bool], timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if done(self):
                    return True
            time.sleep(0.05)
        with self.lock:
            return done(self)
