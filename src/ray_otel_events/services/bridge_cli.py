"""`ray-otel-events bridge`: OTLP/HTTP <-> RayEvent JSON on one HTTP server.

Stdout carries exactly two lines: `listening http=HOST:PORT` once requests are accepted, and on
SIGTERM/SIGINT, after open spans are flushed and every queue drained, `stats {json}`. Logs go to
stderr. Environment: RAY_OTEL_EVENTS_BRIDGE_* (config.py) and the standard OTEL_EXPORTER_OTLP_*
variables for the OTLP side; flags win.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from ray_otel_events.config import BridgeConfig
from ray_otel_events.exporters.transport import HttpTransport, parse_header_flags
from ray_otel_events.receivers.grpc_server import GrpcServer
from ray_otel_events.security.grpc_guard import grpc_interceptors, grpc_options
from ray_otel_events.security.http_limits import ServerGuard
from ray_otel_events.security.options import ServerSecurity, add_security_arguments, security_from_args
from ray_otel_events.services.bridge import BridgeService
from ray_otel_events.services.bridge_workers import run_workers
from ray_otel_events.services.lifecycle import (
    add_logging_arguments,
    configure_logging,
    print_exit_summary,
    settle_heap,
    stop_on_signals,
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Routes: POST /v1/traces and /v1/logs (OTLP/HTTP, protobuf or JSON) -> RayEvent JSON to "
        "--export-addr (other telemetry as plain JSON records to --spans-export-addr); POST "
        "/v1/ray-events (a Ray aggregator's JSON arrays) -> OTLP to --otlp-endpoint or the "
        "OTEL_EXPORTER_OTLP_* variables. GET /metrics, /healthz, /readyz on the same port (Kubernetes: "
        "livenessProbe httpGet /healthz, readinessProbe httpGet /readyz). Prints 'listening "
        "http=HOST:PORT' when ready and a summary table after SIGTERM/SIGINT and the flush ('stats "
        "{json}' with --log-format json)."
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--export-addr",
        help="URL RayEvent JSON arrays (from OTLP input) are POSTed to; without it such input is "
        "counted and dropped",
    )
    parser.add_argument(
        "--spans-export-addr", help="URL plain JSON records of other spans and log records are POSTed to"
    )
    parser.add_argument(
        "--otlp-endpoint",
        help="OTLP/HTTP base URL (/v1/traces and /v1/logs are appended); default: OTEL_EXPORTER_OTLP_*",
    )
    parser.add_argument(
        "--service-name", help="service.name of the exported spans (OTEL_SERVICE_NAME, 'ray')"
    )
    parser.add_argument(
        "--max-body-bytes", type=int, help="request size limit after decompression, HTTP and gRPC (64 MiB)"
    )
    parser.add_argument("--queue-size", type=int, help="items each outgoing queue holds (100000)")
    parser.add_argument(
        "--entity-ttl", type=float, dest="entity_ttl_s", help="seconds an open entity is kept (600)"
    )
    parser.add_argument(
        "--terminal-grace",
        type=float,
        dest="terminal_grace_s",
        help="seconds to wait for trailing pieces after a terminal state (2)",
    )
    parser.add_argument(
        "--shutdown-flush-timeout",
        type=float,
        dest="shutdown_flush_timeout_s",
        help="seconds allowed to drain the queues on shutdown (10)",
    )
    parser.add_argument(
        "--export-header",
        action="append",
        metavar="'NAME: VALUE'",
        help="header sent with every export (repeatable); OTLP exports add OTEL_EXPORTER_OTLP_HEADERS",
    )
    parser.add_argument(
        "--export-ca-file",
        help="PEM CA that verifies https destinations (OTLP: OTEL_EXPORTER_OTLP_CERTIFICATE)",
    )
    parser.add_argument(
        "--queue-dir",
        help="keep every queue and the open entities on disk (SQLite WAL); resumed after a crash or "
        "restart (env RAY_OTEL_EVENTS_QUEUE_DIR; default: memory only)",
    )
    parser.add_argument("--queue-max-bytes", type=int, help="bound of each durable queue (1 GiB)")
    stage = parser.add_mutually_exclusive_group()
    stage.add_argument(
        "--convert-only",
        dest="mode",
        action="store_const",
        const="convert",
        help="RayEvents -> OTLP log records only (each with its trace and span id); spans are "
        "assembled by an --assemble-only tier the Collector routes to by traceID (docs/scaling.md)",
    )
    stage.add_argument(
        "--assemble-only",
        dest="mode",
        action="store_const",
        const="assemble",
        help="OTLP log records carrying RayEvents (HTTP /v1/logs, or gRPC with --grpc-port) -> spans",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        help="also take OTLP over gRPC on this port (0: a free one), as the Collector's loadbalancing "
        "exporter sends it",
    )
    parser.add_argument("--max-open-entities", type=int, help="open task attempts/actors/jobs kept (100000)")
    parser.add_argument(
        "--max-open-bytes",
        type=int,
        help="bytes the open entities may hold (256 MiB); past either bound the least recently "
        "updated leave as incomplete spans, counted",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="processes behind the one port (default 1; 0: one per CPU); RayEvents are routed "
        "between them by trace id so every span is assembled exactly once",
    )
    add_logging_arguments(parser)
    add_security_arguments(parser)


_OVERRIDES = (
    "host",
    "port",
    "export_addr",
    "spans_export_addr",
    "otlp_endpoint",
    "service_name",
    "max_body_bytes",
    "queue_size",
    "entity_ttl_s",
    "terminal_grace_s",
    "shutdown_flush_timeout_s",
    "queue_dir",
    "queue_max_bytes",
    "mode",
    "grpc_port",
    "max_open_entities",
    "max_open_bytes",
    "workers",
)


def run(args: argparse.Namespace) -> int:
    configure_logging(str(args.log_level), args.log_format)
    if args.workers == 0:
        args.workers = os.cpu_count() or 1
    config = BridgeConfig.from_env().with_overrides(**{name: getattr(args, name) for name in _OVERRIDES})
    security = security_from_args(args)
    transport = HttpTransport.build(parse_header_flags(args.export_header), args.export_ca_file or "")
    if config.workers > 1:
        return run_workers(config, security, transport, args.log_format)
    traces, logs = config.otlp("traces"), config.otlp("logs")
    return asyncio.run(serve(BridgeService(config, traces, logs, transport), security, args.log_format))


async def serve(
    service: BridgeService, security: ServerSecurity | None = None, log_format: str = "json"
) -> int:
    config = service.config
    security = security or ServerSecurity()
    guard = ServerGuard(security.limits)
    service.metrics.add_guard(guard)
    runner = guard.runner(service.build_app(security.token), auto_decompress=False)
    await runner.setup()
    try:
        ssl_context = security.tls.ssl_context() if security.tls else None
        await guard.listen(runner, config.host, config.port, ssl_context)
    except OSError as exc:
        print(f"ray-otel-events bridge: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        await runner.cleanup()
        return 1
    grpc_server: GrpcServer | None = None
    if config.grpc_port is not None:
        grpc_server = GrpcServer(
            service.otlp_grpc_receiver,
            config.host,
            config.grpc_port,
            credentials=security.tls.grpc_credentials() if security.tls else None,
            interceptors=grpc_interceptors(guard.errors, security.token),
            max_message_bytes=config.max_body_bytes,  # the same limit as its HTTP bodies
            options=grpc_options(security.limits),
        )
        try:
            await grpc_server.start()
        except OSError as exc:
            print(f"ray-otel-events bridge: {exc}", file=sys.stderr)
            await runner.cleanup()
            return 1
    service.start()
    address: Any = runner.addresses[0]
    stop = stop_on_signals()
    logger.info(
        "bridge ready: %s://%s:%d tls=%s token=%s",
        security.scheme,
        config.host,
        address[1],
        "on" if security.tls else "off",
        "on" if security.token else "off",
    )
    grpc_part = f" grpc={config.host}:{grpc_server.port}" if grpc_server is not None else ""
    settle_heap()
    print(f"listening http={config.host}:{address[1]}{grpc_part}", flush=True)
    await stop.wait()
    if grpc_server is not None:
        await grpc_server.stop(config.shutdown_flush_timeout_s)
    await runner.cleanup()  # stop accepting; requests in progress finish first
    await service.stop()
    stats = service.stats()
    logger.info("bridge stopped")
    print_exit_summary("bridge", service.summary_rows(), stats, log_format)
    return 0
