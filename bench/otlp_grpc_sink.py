"""A minimal OTLP/gRPC sink for the benches: answers every trace and logs Export with success,
parsing nothing (requests arrive as bytes), so it costs the machine as little as possible.

Usage: python otlp_grpc_sink.py        prints `listening grpc=127.0.0.1:PORT` when ready
"""

from __future__ import annotations

import signal
import threading
from concurrent import futures
from typing import Any

import grpc


def _export(request: bytes, context: Any) -> bytes:
    return b""  # an empty Export*ServiceResponse


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    for service in (
        "opentelemetry.proto.collector.trace.v1.TraceService",
        "opentelemetry.proto.collector.logs.v1.LogsService",
    ):
        handler = grpc.unary_unary_rpc_method_handler(_export)  # no (de)serializers: bytes
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening grpc=127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.stop(1)


if __name__ == "__main__":
    main()
