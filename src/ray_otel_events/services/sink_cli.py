"""`ray-otel-events sink`: an HTTP server writing every POSTed event to a JSON Lines file.

Stdout carries `listening http=HOST:PORT` once it accepts requests and, after SIGTERM/SIGINT, a
summary table, or with `--log-format json` the line
`stats {"requests": n, "events": n, "rejected": n, "failed_on_purpose": n}`.
GET /metrics, /healthz and /readyz are served on the same port.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ray_otel_events.config import ConfigError
from ray_otel_events.observability.http_endpoints import Readiness, in_flight_middleware, observability_routes
from ray_otel_events.observability.metrics_registry import ServerMetrics
from ray_otel_events.security.http_limits import ServerGuard
from ray_otel_events.security.options import ServerSecurity, add_security_arguments, security_from_args
from ray_otel_events.services.lifecycle import (
    add_logging_arguments,
    configure_logging,
    print_exit_summary,
    stop_on_signals,
)
from ray_otel_events.services.sink import JsonLinesSink, build_app
from ray_otel_events.services.sink_otlp import otlp_routes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "GET /metrics, /healthz and /readyz on the same port (Kubernetes: livenessProbe httpGet "
        "/healthz, readinessProbe httpGet /readyz). Prints 'listening http=HOST:PORT' when ready."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default 0)")
    parser.add_argument("--out", required=True, help="JSON Lines file events are appended to")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N", help="fail the first N POSTs")
    parser.add_argument("--fail-status", type=int, default=503, help="status for those failures (503)")
    parser.add_argument("--retry-after", default="", help="Retry-After header sent with those failures")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds every POST takes (default 0)")
    add_logging_arguments(parser)
    add_security_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    try:
        sink = JsonLinesSink(
            args.out,
            fail_first=args.fail_first,
            fail_status=args.fail_status,
            retry_after=args.retry_after,
            delay_s=args.delay,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    security = security_from_args(args)
    configure_logging(args.log_level, args.log_format)
    return asyncio.run(serve(sink, args.host, args.port, security, args.log_format))


def sink_metrics(sink: JsonLinesSink) -> ServerMetrics:
    metrics = ServerMetrics("sink")
    metrics.add_total("sink_requests", "POST requests received", lambda: {(): sink.requests})
    metrics.add_total("sink_events", "events written to the output file", lambda: {(): sink.events})
    metrics.add_total("sink_rejected_requests", "requests refused with 400", lambda: {(): sink.rejected})
    metrics.add_total(
        "sink_failed_on_purpose", "requests failed by --fail-first", lambda: {(): sink.failed_on_purpose}
    )
    return metrics


async def serve(
    sink: JsonLinesSink,
    host: str,
    port: int,
    security: ServerSecurity | None = None,
    log_format: str = "json",
) -> int:
    security = security or ServerSecurity()
    try:
        sink.open()
    except OSError as exc:
        print(f"ray-otel-events sink: cannot open {sink.out_path}: {exc}", file=sys.stderr)
        return 1
    metrics = sink_metrics(sink)
    guard = ServerGuard(security.limits)
    metrics.add_guard(guard)
    middlewares: list[Any] = [in_flight_middleware(metrics, "http")]
    if security.token is not None:
        middlewares.insert(0, security.token.http_middleware())
    ready = lambda: Readiness().add("output_open", sink.is_open, str(sink.out_path))  # noqa: E731
    routes = [*observability_routes(metrics, ready), *otlp_routes(sink)]
    runner = guard.runner(build_app(sink, routes, middlewares), auto_decompress=False)
    await runner.setup()
    try:
        ssl_context = security.tls.ssl_context() if security.tls else None
        await guard.listen(runner, host, port, ssl_context)
    except OSError as exc:
        print(f"ray-otel-events sink: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        await runner.cleanup()
        sink.close()
        return 1
    address: Any = runner.addresses[0]
    stop = stop_on_signals()
    print(f"listening http={host}:{address[1]}", flush=True)
    await stop.wait()
    await runner.cleanup()  # lets requests in progress finish before the file closes
    sink.close()
    stats = sink.stats()
    print_exit_summary("sink", list(stats.items()), stats, log_format)
    return 0
