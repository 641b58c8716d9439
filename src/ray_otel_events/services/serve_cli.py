"""`ray-otel-events serve`: the event store, Ray's state API and the page on one HTTP port.

    ray-otel-events serve --port 8265 --store ~/.local/share/ray-otel-events/events.sqlite3
    ray list tasks --address http://127.0.0.1:8265

Point Ray's aggregator (or ours: `aggregator --export-addr http://HOST:PORT/v1/ray-events`) at it,
and OTLP exporters (`OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT`) for spans and task logs.
Stdout carries `listening http=HOST:PORT` once it accepts requests and a summary after
SIGTERM/SIGINT; GET /healthz, /readyz and /metrics on the same port; the page at /.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from ray_otel_events.config import ConfigError
from ray_otel_events.observability.http_endpoints import Readiness, observability_routes
from ray_otel_events.observability.metrics_registry import ServerMetrics
from ray_otel_events.services.lifecycle import (
    add_logging_arguments,
    configure_logging,
    print_exit_summary,
    settle_heap,
    stop_on_signals,
)
from ray_otel_events.services.state_api import StateApi
from ray_otel_events.services.state_intake import StateIntake
from ray_otel_events.store.intake_spool import IntakeSpool
from ray_otel_events.store.sqlite_store import EventStore, StoreError
from ray_otel_events.store.views import StoreViews

logger = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 60.0
GIL_SWITCH_INTERVAL_S = 0.05


def default_store_path() -> Path:
    """`$XDG_DATA_HOME/ray-otel-events/events.sqlite3` (~/.local/share when unset)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "ray-otel-events" / "events.sqlite3"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Prints 'listening http=HOST:PORT' when ready; GET /healthz and /readyz on the same port."
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--store", type=Path, default=None, help=f"SQLite file (default {default_store_path()})"
    )
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=24.0 * 7,
        help="drop a session whose last event is older than this (168)",
    )
    parser.add_argument(
        "--retention-rows",
        type=int,
        default=2_000_000,
        help="over this many state rows, drop the oldest sessions first (2,000,000)",
    )
    parser.add_argument(
        "--retention-mb",
        type=float,
        default=20_000.0,
        help="over this many MB of the store file in use, drop the oldest sessions first (20,000)",
    )
    add_logging_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    if args.retention_hours <= 0 or args.retention_rows <= 0 or args.retention_mb <= 0:
        raise ConfigError("--retention-hours, --retention-rows and --retention-mb must be positive")
    configure_logging(args.log_level, args.log_format)
    path = args.store or default_store_path()
    try:
        store = EventStore(path)
    except (OSError, sqlite3.Error, StoreError) as exc:
        print(f"ray-otel-events serve: cannot open the store {path}: {exc}", file=sys.stderr)
        return 1
    try:
        spool = IntakeSpool(spool_path(path))
    except OSError as exc:
        print(f"ray-otel-events serve: cannot open the intake spool: {exc}", file=sys.stderr)
        store.close()
        return 1
    intake = StateIntake(store, spool)
    try:
        return asyncio.run(serve(intake, args))
    finally:
        intake.close()  # (when serve() did not get to it)
        spool.close()
        store.close()


def spool_path(store: Path) -> Path:
    """Where the POSTs answered but not yet folded wait: beside the store file."""
    return store.with_name(store.name + ".intake")


async def _retention(store: EventStore, args: argparse.Namespace) -> None:
    while True:
        await asyncio.to_thread(
            store.prune,
            max_age_s=args.retention_hours * 3600,
            max_rows=args.retention_rows,
            max_bytes=int(args.retention_mb * 1e6),
        )
        await asyncio.sleep(RETENTION_INTERVAL_S)


async def serve(intake: StateIntake, args: argparse.Namespace) -> int:
    store = intake.store
    api = StateApi(StoreViews(store), intake.settled)
    metrics = ServerMetrics("serve")
    metrics.add_total(
        "serve_events_stored",
        "events folded into the store, by type",
        lambda: {(t,): n for t, n in intake.events_by_type.items()},
        ("event_type",),
    )
    metrics.add_total("serve_duplicates", "events skipped as already stored", lambda: {(): intake.duplicates})
    metrics.add_total(
        "serve_rejected_events", "events that could not be read", lambda: {(): intake.rejected_events}
    )
    metrics.add_total("serve_refused_posts", "POSTs answered 4xx or 5xx", lambda: {(): intake.refused_posts})
    metrics.add_total("serve_spans", "spans stored", lambda: {(): intake.spans})
    metrics.add_gauge(
        "serve_unfolded_events",
        "events answered 200 and not yet folded",
        lambda: {(): intake.fold.pending_events},
    )
    metrics.add_total("serve_log_lines", "task log lines stored", lambda: {(): intake.log_lines})
    ready = lambda: Readiness().add("store_open", True, str(store.path))  # noqa: E731
    app = web.Application(client_max_size=0)
    app.add_routes([*observability_routes(metrics, ready), *intake.routes(), *api.routes()])
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
    except OSError as exc:
        print(f"ray-otel-events serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        await runner.cleanup()
        return 1
    address: Any = runner.addresses[0]
    stop = stop_on_signals()
    retention = asyncio.create_task(_retention(store, args))
    again = intake.start()
    if again:
        logger.info("folding %d events accepted before the last stop", again)
    settle_heap()
    # The event loop (parsing POSTs) and the fold thread both run Python for long stretches: at
    # the default 5 ms they hand the GIL back and forth hundreds of times a second, and each
    # hand-over costs (measured: 34-36 against 25-29 µs of CPU an event at 50 ms).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    print(f"listening http={args.host}:{address[1]}", flush=True)
    await stop.wait()
    retention.cancel()
    await runner.cleanup()  # POSTs in progress are answered (and spooled) first
    await asyncio.to_thread(intake.close)  # then everything answered is folded
    stats = intake.stats()
    print_exit_summary("serve", list(stats.items()), stats, args.log_format)
    return 0
