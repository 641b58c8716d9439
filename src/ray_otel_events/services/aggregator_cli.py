"""`ray-otel-events aggregator`: serve AddEvents over gRPC and publish to an HTTP JSON endpoint.

Configuration comes from Ray's environment variables (config.AggregatorConfig); flags override them.
Stdout carries the ready line `listening grpc=HOST:PORT` once calls are accepted and, on
SIGTERM/SIGINT after the buffer is flushed, the exit summary: a table, or with `--log-format json`
one `stats {json}` line (format: services.aggregator docstring). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys

from ray_otel_events.config import AggregatorConfig, parse_exposable_event_types
from ray_otel_events.exporters.transport import parse_header_flags
from ray_otel_events.security.options import ServerSecurity, add_security_arguments, security_from_args
from ray_otel_events.services.aggregator import AggregatorService, summary_rows
from ray_otel_events.services.lifecycle import (
    add_logging_arguments,
    configure_logging,
    print_exit_summary,
    stop_on_signals,
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Prints 'listening grpc=HOST:PORT' when ready and, after SIGTERM/SIGINT and the flush, a summary "
        "table ('stats {json}' with --log-format json). Environment: Ray's RAY_DASHBOARD_AGGREGATOR_AGENT_* "
        "variables; flags win. Kubernetes: livenessProbe httpGet /healthz and readinessProbe httpGet "
        "/readyz on --metrics-port, or a grpc probe (grpc.health.v1) on the gRPC port."
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--export-addr",
        help="URL each batch is POSTed to (env RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR)",
    )
    parser.add_argument(
        "--publish",
        dest="publish_to_http",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="publish to the export address (default on when an address is set)",
    )
    parser.add_argument("--max-buffer-size", type=int, help="events the buffer holds (default 100000)")
    parser.add_argument("--max-buffer-bytes", type=int, help="bytes the buffer holds (default 256 MiB)")
    parser.add_argument("--max-batch-size", type=int, help="events per POST (default 1000)")
    parser.add_argument(
        "--exposable-event-types",
        metavar="TYPES",
        help="comma list of event type names, or ALL (default: Ray's list, profile events excluded)",
    )
    parser.add_argument(
        "--preserve-proto-field-name",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="snake_case JSON keys instead of lowerCamelCase",
    )
    parser.add_argument(
        "--publisher-timeout", type=float, dest="publisher_timeout_s", help="seconds per POST"
    )
    parser.add_argument("--max-retries", type=int, dest="publisher_max_retries", help="-1 retries forever")
    parser.add_argument("--initial-backoff", type=float, dest="publisher_initial_backoff_s", help="seconds")
    parser.add_argument("--max-backoff", type=float, dest="publisher_max_backoff_s", help="seconds")
    parser.add_argument("--jitter-ratio", type=float, dest="publisher_jitter_ratio", help="0..1")
    parser.add_argument(
        "--send-interval",
        type=float,
        dest="publisher_send_interval_s",
        help="seconds to top a batch up after its first event (default 0.1)",
    )
    parser.add_argument(
        "--shutdown-flush-timeout",
        type=float,
        dest="shutdown_flush_timeout_s",
        help="seconds allowed to flush the buffer on shutdown (default 10)",
    )
    parser.add_argument(
        "--encoder-processes",
        type=int,
        help="worker processes that encode JSON beside the event loop; 0 encodes on the loop"
        " (default: 0 where the compiled JSON writer is built, else 2)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="HTTP port for GET /metrics (Prometheus), /healthz and /readyz; 0 picks one (default: off)",
    )
    parser.add_argument(
        "--export-header",
        action="append",
        metavar="'NAME: VALUE'",
        help="header sent with every POST to --export-addr (repeatable), e.g. 'Authorization: Bearer T'",
    )
    parser.add_argument("--export-ca-file", help="PEM CA that verifies an https --export-addr")
    parser.add_argument(
        "--queue-dir",
        help="keep accepted events on disk (SQLite WAL) until delivered; replayed after a crash or "
        "restart (env RAY_OTEL_EVENTS_QUEUE_DIR; default: memory only)",
    )
    parser.add_argument(
        "--queue-max-bytes", type=int, help="bound of the durable queue; oldest dropped, counted (1 GiB)"
    )
    parser.add_argument(
        "--dedup-window",
        type=int,
        help="recent eventIds remembered to drop retried duplicates; 0: off (100000)",
    )
    add_logging_arguments(parser)
    add_security_arguments(parser)


_OVERRIDES = (
    "host",
    "grpc_port",
    "export_addr",
    "publish_to_http",
    "max_buffer_size",
    "max_buffer_bytes",
    "max_batch_size",
    "preserve_proto_field_name",
    "publisher_timeout_s",
    "publisher_max_retries",
    "publisher_initial_backoff_s",
    "publisher_max_backoff_s",
    "publisher_jitter_ratio",
    "publisher_send_interval_s",
    "shutdown_flush_timeout_s",
    "encoder_processes",
    "metrics_port",
    "export_ca_file",
    "queue_dir",
    "queue_max_bytes",
    "dedup_window",
)


def config_from_args(args: argparse.Namespace) -> AggregatorConfig:
    """Environment first, then every flag that was given; raises ConfigError on a bad value."""
    config = AggregatorConfig.from_env().with_overrides(**{name: getattr(args, name) for name in _OVERRIDES})
    if args.export_header:
        headers = tuple(parse_header_flags(args.export_header).items())
        config = dataclasses.replace(config, export_headers=headers)
    if args.exposable_event_types is not None:
        # None from the parser means ALL, so this one cannot go through with_overrides.
        allowed = parse_exposable_event_types(args.exposable_event_types, source="--exposable-event-types")
        config = dataclasses.replace(config, exposable_event_types=allowed)
        config.validate()
    return config


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    security = security_from_args(args)
    configure_logging(str(args.log_level), args.log_format)
    return asyncio.run(serve(config, security, args.log_format))


async def serve(
    config: AggregatorConfig, security: ServerSecurity | None = None, log_format: str = "json"
) -> int:
    service = AggregatorService(config, security=security)
    stop = stop_on_signals()
    try:
        port = await service.start()
    except OSError as exc:
        print(f"ray-otel-events aggregator: {exc}", file=sys.stderr)
        await service.shutdown()
        return 1
    if not service.processing_enabled:
        logger.warning("no export address (or publishing off): events are accepted and counted, not kept")
    admin = f" metrics http={config.host}:{service.admin.port}" if service.admin else ""
    logger.info(
        "aggregator ready: grpc=%s:%d%s tls=%s token=%s export=%s",
        config.host,
        port,
        admin,
        "on" if service.security.tls else "off",
        "on" if service.security.token else "off",
        config.export_addr or "none",
    )
    print(f"listening grpc={config.host}:{port}", flush=True)
    await stop.wait()
    await service.shutdown()
    stats = service.stats()
    logger.info("aggregator stopped: %d events received", stats["received_total"])
    print_exit_summary("aggregator", summary_rows(stats), stats, log_format)
    return 0
