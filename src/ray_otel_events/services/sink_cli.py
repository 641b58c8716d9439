"""`ray-otel-events sink`: an HTTP server writing every POSTed event to a JSON Lines file.

Stdout carries `listening http=HOST:PORT` once it accepts requests and, after SIGTERM/SIGINT,
`stats {"requests": n, "events": n, "rejected": n, "failed_on_purpose": n}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from aiohttp import web

from ray_otel_events.config import ConfigError
from ray_otel_events.services.lifecycle import stop_on_signals
from ray_otel_events.services.sink import JsonLinesSink, build_app
from ray_otel_events.services.sink_otlp import otlp_routes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default 0)")
    parser.add_argument("--out", required=True, help="JSON Lines file events are appended to")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N", help="fail the first N POSTs")
    parser.add_argument("--fail-status", type=int, default=503, help="status for those failures (503)")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    try:
        sink = JsonLinesSink(args.out, fail_first=args.fail_first, fail_status=args.fail_status)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return asyncio.run(serve(sink, args.host, args.port))


async def serve(sink: JsonLinesSink, host: str, port: int) -> int:
    try:
        sink.open()
    except OSError as exc:
        print(f"ray-otel-events sink: cannot open {sink.out_path}: {exc}", file=sys.stderr)
        return 1
    runner = web.AppRunner(build_app(sink, otlp_routes(sink)), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
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
    print("stats " + json.dumps(sink.stats(), sort_keys=True), flush=True)
    return 0
