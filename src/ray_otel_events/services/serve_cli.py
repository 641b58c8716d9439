"""`ray-otel-events serve`: the event store, Ray's state API and the page on one HTTP port.

    ray-otel-events serve --port 8265 --store ~/.local/share/ray-otel-events/events.sqlite3
    ray-otel-events serve --port 8265 --store postgresql://USER@HOST:5432/DB   # several may share it
    ray list tasks --address http://127.0.0.1:8265

Point Ray's aggregator at it (`eval "$(ray-otel-events ray-env http://HOST:PORT)"` before `ray
start`, logged at start with this serve's address; or ours: `aggregator --export-addr
http://HOST:PORT/v1/ray-events`), and OTLP exporters (`OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT`)
for spans and task logs, and each node's `ray-otel-events collect` (its log files to
`/v1/ray-log-files`, services/log_file_intake.py). A cluster wired wrong is told once
(services/wiring_watch.py).
Stdout carries `listening http=HOST:PORT` once it accepts requests and a summary after
SIGTERM/SIGINT; GET /healthz, /readyz and /metrics on the same port; the page at /. With
`--ray-dashboard-port`, Ray's own dashboard page (from the installed `ray` package) over the same
store on a second port, announced by a second line, `listening ray-dashboard=HOST:PORT`; with
`--ray-gcs-port` too, the two GCS calls Ray's `ray logs --address HOST:PORT` makes to find that
dashboard (services/ray_gcs_facade.py), announced by `listening ray-gcs=HOST:PORT`. With a
token (ours, or Ray's under RAY_AUTH_MODE=token) every request on either port but the probes and
the pages' shells must carry it as Ray's CLI, aggregator and browser send it (security/auth.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web

from ray_otel_events import config
from ray_otel_events.config import ConfigError
from ray_otel_events.events.registry import event_type_name_label
from ray_otel_events.observability.http_endpoints import Readiness, observability_routes
from ray_otel_events.observability.metrics_registry import ServerMetrics
from ray_otel_events.receivers import ray_events_http, ray_export_events_http, ray_log_files_http
from ray_otel_events.receivers.json_answers import refused_by_path
from ray_otel_events.security.auth import no_authentication_routes
from ray_otel_events.security.grpc_guard import grpc_interceptors, grpc_options
from ray_otel_events.security.http_limits import ServerGuard
from ray_otel_events.security.options import ServerSecurity, add_security_arguments, security_from_args
from ray_otel_events.services.lifecycle import (
    add_logging_arguments,
    configure_logging,
    print_exit_summary,
    settle_heap,
    stop_on_signals,
)
from ray_otel_events.services.log_file_intake import LogFileIntake
from ray_otel_events.services.ray_dashboard import (
    DashboardUnavailable,
    RayDashboard,
    dashboard_build,
    ray_page_elsewhere,
)
from ray_otel_events.services.ray_gcs_facade import (
    GcsProtocolUnavailable,
    RayGcsFacade,
    dashboard_address,
    load_ray_gcs_protocol,
    start_gcs_server,
)
from ray_otel_events.services.state_api import StateApi
from ray_otel_events.services.state_intake import StateIntake
from ray_otel_events.services.store_watch import StoreWatch
from ray_otel_events.services.wiring_watch import WiringWatch, serve_url, wiring_command
from ray_otel_events.store.backend import (
    Retention,
    Store,
    StoreError,
    StoreUnavailable,
    UnsupportedStoreError,
)
from ray_otel_events.store.intake_spool import IntakeSpool
from ray_otel_events.store.location import check_location, is_url, open_store
from ray_otel_events.store.ray_dashboard_views import RayDashboardViews
from ray_otel_events.store.store_lock import StoreLock, StoreLockedError
from ray_otel_events.store.views import StoreViews

logger = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 60.0
GIL_SWITCH_INTERVAL_S = 0.05
GCS_GRACE_S = 2.0


def default_store_path() -> Path:
    """`$XDG_DATA_HOME/ray-otel-events/events.sqlite3` (~/.local/share when unset)."""
    return Path(config.data_home()) / "ray-otel-events" / "events.sqlite3"


def chosen_store(argument: str | None) -> str | Path:
    """`--store`, else RAY_OTEL_EVENTS_STORE, else the default file."""
    return argument or config.store_location() or default_store_path()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Prints 'listening http=HOST:PORT' when ready; GET /healthz and /readyz on the same port."
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--store",
        default=None,
        help="SQLite file or postgresql://USER@HOST:PORT/DB"
        f" (default ${config.STORE}, else {default_store_path()})",
    )
    parser.add_argument(
        "--spool",
        type=Path,
        default=None,
        help="folder for POSTs answered and not yet folded (default: beside a SQLite file; for"
        " PostgreSQL, one per database under the data folder; each `serve` process needs its own)",
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
    parser.add_argument(
        "--ray-dashboard-port",
        type=int,
        default=None,
        help="also serve Ray's dashboard page (needs the `ray` extra) over the store on this port; "
        "0 picks a free one (default: off)",
    )
    parser.add_argument(
        "--ray-gcs-port",
        type=int,
        default=None,
        help="also answer the GCS calls Ray's `ray logs --address HOST:PORT` makes to find the dashboard "
        "port (needs --ray-dashboard-port); 0 picks a free one (default: off)",
    )
    parser.add_argument(
        "--ray-gcs-host",
        default=None,
        help="the address --ray-gcs-port binds (default: --host). Ray's CLI dials the machine's own "
        "address when given a loopback one, unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is set for it",
    )
    parser.add_argument(
        "--wiring-check-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="warn (once) when no Ray event arrived this long after start, or a session lacks a kind"
        f" of event this long after the events that need it (default ${config.WIRING_CHECK_DELAY_S},"
        f" else {config.DEFAULT_WIRING_CHECK_DELAY_S:.0f})",
    )
    add_security_arguments(parser)
    add_logging_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    args.ray_dashboard_build = None
    if args.ray_dashboard_port is not None:
        if not 0 <= args.ray_dashboard_port <= 65535:
            raise ConfigError(f"--ray-dashboard-port must be 0..65535, got {args.ray_dashboard_port}")
        try:
            args.ray_dashboard_build = dashboard_build()
        except DashboardUnavailable as exc:
            raise ConfigError(f"--ray-dashboard-port: {exc}") from None
    args.ray_gcs_protocol = None
    if args.ray_gcs_port is not None:
        if not 0 <= args.ray_gcs_port <= 65535:
            raise ConfigError(f"--ray-gcs-port must be 0..65535, got {args.ray_gcs_port}")
        if args.ray_dashboard_port is None:
            raise ConfigError(
                "--ray-gcs-port needs --ray-dashboard-port: Ray's CLI reads the dashboard's address "
                "from it and asks the dashboard for the logs"
            )
        try:
            args.ray_gcs_protocol = load_ray_gcs_protocol()
        except GcsProtocolUnavailable as exc:
            raise ConfigError(f"--ray-gcs-port: {exc}") from None
    if args.wiring_check_delay is None:
        args.wiring_check_delay = config.wiring_check_delay_s()
    elif args.wiring_check_delay <= 0:
        raise ConfigError(f"--wiring-check-delay must be above 0 seconds, got {args.wiring_check_delay}")
    if args.retention_hours <= 0 or args.retention_rows <= 0 or args.retention_mb <= 0:
        raise ConfigError("--retention-hours, --retention-rows and --retention-mb must be positive")
    args.max_pending_bytes = config.store_max_pending_bytes()
    args.fold_linger_s = config.store_fold_linger_s()
    configure_logging(args.log_level, args.log_format)
    security = security_from_args(args)
    location = chosen_store(args.store)
    try:
        check_location(location)
    except UnsupportedStoreError as exc:
        print(f"ray-otel-events serve: --store: {exc}", file=sys.stderr)
        return 2
    if is_url(location):
        spool = args.spool or default_spool(str(location))
        locked = spool  # one process a spool; the database itself takes many
    else:
        locked = Path(location)
        spool = args.spool or spool_path(locked)
    try:  # one writer a store file: a second `serve` would race the first's folds
        lock = StoreLock(locked, spool=is_url(location))
    except StoreLockedError as exc:
        print(f"ray-otel-events serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ray-otel-events serve: cannot lock the store {locked}: {exc}", file=sys.stderr)
        return 1
    try:
        return _run_locked(location, spool, args, security)
    finally:
        lock.release()


def _run_locked(
    location: str | Path, spool_dir: Path, args: argparse.Namespace, security: ServerSecurity
) -> int:
    try:
        store = open_store(location)
    except (StoreUnavailable, UnsupportedStoreError) as exc:
        print(f"ray-otel-events serve: cannot open the store: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error, StoreError) as exc:
        print(f"ray-otel-events serve: cannot open the store {location}: {exc}", file=sys.stderr)
        return 1
    try:
        spool = IntakeSpool(spool_dir)
    except OSError as exc:
        print(f"ray-otel-events serve: cannot open the intake spool: {exc}", file=sys.stderr)
        store.close()
        return 1
    intake = StateIntake(store, spool, StoreWatch(store), args.max_pending_bytes, args.fold_linger_s)
    args.store_kind = "postgresql" if is_url(location) else "sqlite"
    try:
        return asyncio.run(serve(intake, args, security))
    finally:
        intake.close()  # (when serve() did not get to it)
        spool.close()
        store.close()


def conninfo_parts(url: str) -> str:
    """HOST:PORT/DB of a PostgreSQL URL."""
    rest = url.split("://", 1)[1].split("?", 1)[0]
    host_db = rest.rsplit("@", 1)[-1]
    return host_db


def events_by_label(by_type: dict[str, int]) -> dict[tuple[str, ...], float]:
    """Stored events by their type's metric label (a type the schema does not know: `unknown`)."""
    out: dict[tuple[str, ...], float] = {}
    for name, count in by_type.items():
        key = (event_type_name_label(name),)
        out[key] = out.get(key, 0) + count
    return out


def default_spool(url: str) -> Path:
    """A PostgreSQL store's spool: under the data folder, named after the database."""
    name = "".join(c if c.isalnum() or c in "-." else "_" for c in conninfo_parts(url))
    return default_store_path().with_name(f"postgresql-{name}.intake")


def spool_path(store: Path) -> Path:
    """Where the POSTs answered but not yet folded wait: beside the store file."""
    return store.with_name(store.name + ".intake")


async def _retention(store: Store, args: argparse.Namespace) -> None:
    retention = Retention(
        max_age_s=args.retention_hours * 3600,
        max_rows=args.retention_rows,
        max_bytes=int(args.retention_mb * 1e6),
    )
    while True:
        try:
            await asyncio.to_thread(store.prune, retention)
        except StoreUnavailable as exc:  # the database is away: the next round tries again
            logger.warning("retention skipped: %s", exc)
        await asyncio.sleep(RETENTION_INTERVAL_S)


async def serve(intake: StateIntake, args: argparse.Namespace, security: ServerSecurity) -> int:
    store = intake.store
    watch = intake.watch or StoreWatch(store)
    delay = getattr(args, "wiring_check_delay", config.DEFAULT_WIRING_CHECK_DELAY_S)
    views = StoreViews(store, wiring_delay_s=delay)
    api = StateApi(views, intake.settled, watch)
    metrics = ServerMetrics("serve")
    metrics.add_total(
        "serve_events_stored",
        "events folded into the store, by type",
        lambda: events_by_label(intake.events_by_type),
        ("event_type",),
    )
    metrics.add_total(
        "serve_unknown_type_events",
        "events of a type this version does not know (a later Ray's), kept raw, by type"
        " (the first 64 names apart, then `other`)",
        lambda: {(name,): float(count) for name, count in intake.unknown_types.by_name().items()},
        ("event_type",),
    )
    metrics.add_total("serve_duplicates", "events skipped as already stored", lambda: {(): intake.duplicates})
    metrics.add_total(
        "serve_rejected_events", "events that could not be read", lambda: {(): intake.rejected_events}
    )
    metrics.add_total(
        "serve_set_aside_events",
        "events whose fold failed, kept apart (`ray-otel-events store refused` lists them)",
        lambda: {(): intake.fold.set_aside},
    )
    metrics.add_total("serve_spans", "spans stored", lambda: {(): intake.spans})
    metrics.add_gauge(
        "serve_unfolded_events",
        "events answered 200 and not yet folded",
        lambda: {(): intake.fold.pending_events},
    )
    metrics.add_total(
        "serve_store_losses", "times the store's database became unreachable", lambda: {(): watch.losses}
    )
    metrics.add_total("serve_log_lines", "task log lines stored", lambda: {(): intake.log_lines})
    log_files = LogFileIntake(store, watch)
    refusing = {
        ray_events_http.PATH: intake.ray_events.counters,
        ray_export_events_http.PATH: intake.export_events.counters,
        ray_log_files_http.PATH: log_files.receiver.counters,
    }
    metrics.add_total(
        "serve_refused_posts",
        "POSTs answered 4xx or 5xx, by path and status",
        lambda: refused_by_path(refusing),
        ("path", "status"),
    )
    metrics.add_total(
        "serve_log_file_bytes",
        "bytes of nodes' log files stored (ray-otel-events collect)",
        lambda: {(): log_files.stored_bytes},
    )
    metrics.add_gauge(
        "serve_store_writer",
        "1 for the code that writes the store's rows (compiled or python) and why not the compiled one",
        lambda: {(store.writer, store.writer_reason or ""): 1.0},
        ("writer", "reason"),
    )
    writer = store.writer + (f": {store.writer_reason}" if store.writer_reason else "")

    def ready() -> Readiness:
        """Open by design (a probe carries no token): it says what is wrong, never where the store
        is (its file, host, port or database are in the log)."""
        kind = getattr(args, "store_kind", "")
        reachable = watch.unavailable is None
        stuck = intake.fold.stuck
        return (
            Readiness()
            .add("store_open", True, kind)
            .add(
                "store_reachable", reachable, "yes" if reachable else "the store's database cannot be reached"
            )
            .add("store_folding", stuck is None, stuck or "folding")
            .add("store_writer", True, writer)
        )

    token = security.token
    guard = ServerGuard(security.limits)  # one for both HTTP ports: one process's memory and descriptors
    metrics.add_guard(guard)
    app = web.Application(
        client_max_size=0,
        middlewares=[token.open_pages(["/"], ("/static/", "/task/")).http_middleware()] if token else [],
    )
    app.add_routes(token.http_routes() if token else no_authentication_routes())
    build = getattr(args, "ray_dashboard_build", None)
    dashboard = RayDashboard(RayDashboardViews(api.views), api, build)
    page_port: list[int] = []  # the dashboard port, once listening: named to whoever asks here
    app.add_routes(
        [
            *observability_routes(metrics, ready),
            *intake.routes(),
            *log_files.routes(),
            *dashboard.cli_routes(),
            web.get("/{tail:(logical|nodes|events)(/.*)?}", ray_page_elsewhere(args.host, page_port)),
            *api.routes(),
        ]
    )
    runner = guard.runner(app, auto_decompress=False)
    runners = [runner]
    if build is not None:
        runners.append(guard.runner(dashboard.app(token)))
    tls = security.tls
    started: list[web.AppRunner] = []
    for one, port in zip(runners, (args.port, args.ray_dashboard_port), strict=False):
        await one.setup()
        started.append(one)
        try:
            await guard.listen(one, args.host, port, tls.ssl_context() if tls else None)
        except OSError as exc:
            print(f"ray-otel-events serve: cannot listen on {args.host}:{port}: {exc}", file=sys.stderr)
            for up in reversed(started):
                await up.cleanup()
            return 1
    gcs: grpc.aio.Server | None = None
    protocol = getattr(args, "ray_gcs_protocol", None)
    if protocol is not None:
        ray_dashboard = dashboard_address(args.host, runners[1].addresses[0][1], protocol)
        gcs_host = args.ray_gcs_host or args.host
        try:
            gcs, gcs_port = await start_gcs_server(
                RayGcsFacade(protocol, ray_dashboard, errors=guard.errors),
                [gcs_host],
                args.ray_gcs_port,
                credentials=tls.grpc_credentials() if tls else None,
                interceptors=grpc_interceptors(guard.errors, token),
                options=grpc_options(security.limits),
            )
        except OSError as exc:
            print(f"ray-otel-events serve: --ray-gcs-port: {exc}", file=sys.stderr)
            for up in reversed(started):
                await up.cleanup()
            return 1
    address: Any = runner.addresses[0]
    if len(runners) > 1:
        page_port.append(runners[1].addresses[0][1])
    stop = stop_on_signals()
    retention = asyncio.create_task(_retention(store, args))
    watching = asyncio.create_task(watch.run())
    again = intake.start()
    if again:
        logger.info("folding %d events accepted before the last stop", again)
    settle_heap()
    # The event loop (parsing POSTs) and the fold thread both run Python for long stretches: at
    # the default 5 ms they hand the GIL back and forth hundreds of times a second, and each
    # hand-over costs CPU (bench/HISTORY.md, "Figures once quoted in the code").
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    print(f"listening http={args.host}:{address[1]}", flush=True)
    if len(runners) > 1:
        print(f"listening ray-dashboard={args.host}:{runners[1].addresses[0][1]}", flush=True)
    if gcs is not None:
        print(f"listening ray-gcs={args.host}:{gcs_port}", flush=True)
    url = serve_url(args.host, address[1], tls is not None)
    logger.info(
        "wire a Ray cluster to this serve: on every node, before `ray start`, run: %s", wiring_command(url)
    )
    wiring = WiringWatch(
        url, delay, lambda: intake.stats()["posts"] > 0 or bool(intake.events_by_type), views.session_list
    )
    wiring_checks = asyncio.create_task(wiring.run())
    await stop.wait()
    wiring_checks.cancel()
    retention.cancel()
    watching.cancel()
    if gcs is not None:
        await gcs.stop(GCS_GRACE_S)
    for one in reversed(runners):
        await one.cleanup()  # POSTs in progress are answered (and spooled) first
    await asyncio.to_thread(intake.close)  # then everything answered is folded
    # every refused post, log files' too, counted where the metric counts them
    stats = {**intake.stats(), "refused_posts": int(sum(refused_by_path(refusing).values()))}
    print_exit_summary("serve", list(stats.items()), stats, args.log_format)
    return 0
